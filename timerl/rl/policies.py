"""Actor and critic networks for the algorithm files (CleanRL's ``layer_init`` choices).

Hidden layers use orthogonal init with gain sqrt(2), the actor's output gain 0.01 and the
critic's 1.0; tanh activations. Observations of any shape are flattened to one axis.
"""

from __future__ import annotations

import math

from .common import mlp_sizes


class MLP:
    """tanh MLP built from ``tl.nn.Linear`` layers with per-layer orthogonal gains."""

    def __init__(self, sizes, out_gain, domain):
        import timerl as tl

        self.layers = []
        for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
            last = k == len(sizes) - 2
            self.layers.append(tl.nn.Linear(n_in, n_out, domain=domain, init="orthogonal",
                                            gain=out_gain if last else math.sqrt(2.0)))

    def __call__(self, x):
        import timerl as tl

        for k, layer in enumerate(self.layers):
            x = layer(x)
            if k < len(self.layers) - 1:
                x = tl.tanh(x)
        return x

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


def flatten_obs(env, obs):
    """``(..., N, *obs) -> (..., N, prod(obs))``."""
    k = len(env.single_observation_shape)
    if k == 1:
        return obs
    lead = tuple(obs.shape[: obs.ndim - k])
    return obs.reshape(lead + (math.prod(env.single_observation_shape),))


class Actor:
    """π(a | o): categorical over ``env.num_actions`` or a diagonal Gaussian with learned log σ."""

    def __init__(self, env, args, domain):
        import timerl as tl

        self.env = env
        obs_dim = math.prod(env.single_observation_shape)
        n_out = env.num_actions if env.discrete else env.single_action_shape[0]
        self.net = MLP(mlp_sizes(obs_dim, args, n_out), 0.01, domain)
        self.log_std = None
        if not env.discrete:
            self.log_std = tl.nn.Parameter((n_out,), domain=domain, init="zeros", name="log_std")

    def dist(self, obs):
        import timerl as tl

        out = self.net(flatten_obs(self.env, obs))
        if self.env.discrete:
            return tl.distributions.Categorical(logits=out)
        return Diagonal(tl.distributions.Normal(out, self.log_std))

    def parameters(self):
        return self.net.parameters() + ([self.log_std] if self.log_std is not None else [])


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


class Critic:
    """V(o): a scalar per env."""

    def __init__(self, env, args, domain):
        self.env = env
        self.net = MLP(mlp_sizes(math.prod(env.single_observation_shape), args, 1), 1.0, domain)

    def __call__(self, obs):
        v = self.net(flatten_obs(self.env, obs))
        return v.squeeze(-1)

    def parameters(self):
        return self.net.parameters()
