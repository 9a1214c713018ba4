"""Actor and critic networks for the algorithm files (CleanRL's ``layer_init`` choices).

Hidden layers use orthogonal init with gain sqrt(2), the actor's output gain 0.01 and the
critic's 1.0; tanh activations. Observations of any shape are flattened to one axis.
"""

from __future__ import annotations

import math

from .. import distributions, nn
from ..api.naming import relative
from .common import mlp_sizes


def flatten_obs(env, obs):
    """``(..., N, *obs) -> (..., N, prod(obs))``."""
    k = len(env.single_observation_shape)
    if k == 1:
        return obs
    lead = tuple(obs.shape[: obs.ndim - k])
    return obs.reshape(lead + (math.prod(env.single_observation_shape),))


class Actor(nn.Module):
    """π(a | o): categorical over ``env.num_actions`` or a diagonal Gaussian with learned log σ.

    ``actor.at(k, 0)`` (from ``tl.nn.Module``) reads every parameter at ``k == 0``.
    """

    def __init__(self, env, args, domain):
        self.env = env
        obs_dim = math.prod(env.single_observation_shape)
        n_out = env.num_actions if env.discrete else env.single_action_shape[0]
        self.net = nn.MLP(mlp_sizes(obs_dim, args, n_out), activation="tanh", domain=domain,
                          gain=math.sqrt(2.0), out_gain=0.01, seed=args.seed * 1000 + 1, name="actor")
        self.log_std = None
        if not env.discrete:
            self.log_std = nn.Parameter((n_out,), domain=domain, init="zeros", name="actor.log_std")

    def dist(self, obs):
        out = self.net(flatten_obs(self.env, obs))
        if self.env.discrete:
            return distributions.Categorical(logits=out)
        return Diagonal(distributions.Normal(out, self.log_std))


class Diagonal:
    """A Normal over an action vector: log-probabilities and entropies summed over its last axis."""

    def __init__(self, normal):
        self.normal = normal

    def sample(self):
        return self.normal.sample()

    def log_prob(self, a):
        return self.normal.log_prob(a).sum(axis=-1)

    def entropy(self):
        return self.normal.entropy().sum(axis=-1)


class Critic(nn.Module):
    """V(o): a scalar per env."""

    def __init__(self, env, args, domain):
        self.env = env
        self.net = nn.MLP(mlp_sizes(math.prod(env.single_observation_shape), args, 1), activation="tanh",
                          domain=domain, gain=math.sqrt(2.0), out_gain=1.0, seed=args.seed * 1000 + 101,
                          name="critic")

    def forward(self, obs):
        return self.net(flatten_obs(self.env, obs)).squeeze(-1)


def acting_copy(module, outer, inner):
    """``module`` as iteration ``outer`` starts, for parameters that live over ``(outer, inner)``.

    Each parameter ``p`` gets a snapshot ``q`` over ``(outer,)``: ``q[0]`` is ``p``'s initial
    value and ``q[i] = p[i - 1, K]``, the parameters the previous iteration ended with (equal
    to ``p[i, 0]``). Reading ``q`` rather than ``p[i, 0]`` keeps the acting loop and the update
    loop of one iteration apart in the dependence graph: within iteration ``i`` the acting
    loop never reads a tensor that the update loop writes, so each loop is ordered by its own
    dim (``t`` ascending, ``k`` ascending) without a whole-program isl schedule.
    """
    from ..api.ops import placeholder
    from ..api.tensor import RecurrentTensor

    new = object.__new__(type(module))
    for key, v in module.__dict__.items():
        new.__dict__[key] = _snapshot_value(v, outer, inner, placeholder, RecurrentTensor)
    return new


def _snapshot_value(v, outer, inner, placeholder, RecurrentTensor):
    if isinstance(v, nn.Module):
        return acting_copy(v, outer, inner)
    if isinstance(v, (list, tuple)):
        return type(v)(_snapshot_value(x, outer, inner, placeholder, RecurrentTensor) for x in v)
    if isinstance(v, RecurrentTensor) and v.prog.pdg.nodes[v.nid].get("parameter"):
        pdg = v.prog.pdg
        (init_nid, init_edge), *_ = pdg.inputs(v.nid)          # branch 0: p[0, 0] = init
        init = RecurrentTensor(v.prog, init_nid, init_edge.out)
        q = placeholder(v.shape, v.dtype, (outer,), name=f"{relative(v.node.name)}@acting")
        q[0] = init
        q[outer] = v[outer - 1, inner.bound]
        pdg.nodes[q.nid]["snapshot_of"] = v.nid   # a checkpoint restores q's first value with p's
        return q
    return v
