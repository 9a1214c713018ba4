"""Probability distributions over recurrent tensors (policies).

    pi = tl.distributions.Categorical(logits=net(o))
    a = pi.sample()                 # int64, drawn with tl.random.categorical
    logp = pi.log_prob(a)           # differentiable in the logits
    ent = pi.entropy()

``sample()`` carries no gradient (as ``torch.distributions``' ``sample``): a policy-gradient
loss differentiates ``log_prob`` of the sampled action, not the sample.

Labels: ``Categorical.log_prob``, ``Categorical.entropy``, ``Normal.sample``, ... (the results;
the ops inside read ``Categorical.<op>``).
"""

from __future__ import annotations

import math

from .api import functions as F
from .api import ops as O
from .api import random as R
from .api.grad_rules import ones_like
from .api.naming import labelled, named
from .errors import ShapeError

__all__ = ["Categorical", "Normal"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class Categorical:
    """A categorical distribution along the last axis of ``logits`` (numerically stable: the
    log-probabilities are ``logits - logsumexp(logits)``).

    ``logits`` must be float with at least one axis (else :class:`tl.ShapeError`); attributes
    ``logits``, ``log_probs``, ``probs``.

        pi = tl.distributions.Categorical(logits=actor(o))   # logits (N, A)
        a = pi.sample()                                       # (N,) int64
        loss = -(pi.log_prob(a) * adv).mean() - 0.01 * pi.entropy().mean()
    """

    @labelled("Categorical")
    def __init__(self, logits):
        self.logits = O.as_tensor(logits)
        if self.logits.dtype.kind != "f" or self.logits.ndim < 1:
            raise ShapeError(f"Categorical: logits {self.logits.name!r} must be float with at least one axis")
        self.log_probs = named(self.logits - self.logits.logsumexp(axis=-1, keepdims=True), "log_probs")

    @property
    @labelled("Categorical")
    def probs(self):
        """``exp(log_probs)``: the probabilities along the last axis."""
        return named(F.exp(self.log_probs), "probs")

    @labelled("Categorical")
    def sample(self, domain=()):
        """One action per point of the logits' domain (and of ``domain``), without gradient."""
        return named(R.categorical(self.logits.detach(), domain=domain), "sample")

    @labelled("Categorical")
    def log_prob(self, a):
        """``log π(a)`` of integer actions ``a`` of shape ``logits.shape[:-1]`` (floats are cast to int64),
        differentiable in the logits; a mismatched shape is a :class:`tl.ShapeError`.
        """
        a = O.as_tensor(a)
        if a.dtype.kind not in "iu":
            a = a.astype("int64")
        idx = O.unsqueeze(a, -1)
        if idx.ndim != self.log_probs.ndim:
            raise ShapeError(f"Categorical.log_prob: action {a.name!r} of shape {tuple(a.shape)} does not match "
                               f"logits of shape {tuple(self.logits.shape)}")
        return named(O.squeeze(O.take_along_axis(self.log_probs, idx, axis=-1), -1), "log_prob")

    @labelled("Categorical")
    def entropy(self):
        """``-Σ p log p`` along the last axis: shape ``logits.shape[:-1]``."""
        return named(-(self.probs * self.log_probs).sum(axis=-1), "entropy")


class Normal:
    """A normal distribution with ``mean`` and learned ``log_std`` (broadcast against each other).

    All methods are elementwise: for a diagonal Gaussian policy sum ``log_prob`` and
    ``entropy`` over the action axis.

        pi = tl.distributions.Normal(mean=actor(o), log_std=log_std)
        a = pi.sample()                                  # no gradient
        logp = pi.log_prob(a).sum(axis=-1)
    """

    @labelled("Normal")
    def __init__(self, mean, log_std):
        self.mean, self.log_std = O.as_tensor(mean), O.as_tensor(log_std)
        self.shape = O.broadcast_shapes([self.mean.shape, self.log_std.shape], [self.mean.name, self.log_std.name])

    @property
    @labelled("Normal")
    def std(self):
        """``exp(log_std)``."""
        return named(F.exp(self.log_std), "std")

    @labelled("Normal")
    def sample(self, domain=()):
        """``mean + std * noise`` per point of the operands' domains (and of ``domain``), without
        gradient (``log_prob`` of the sample is what a policy gradient differentiates)."""
        domain = tuple(domain) if isinstance(domain, (tuple, list)) else (domain,)
        domain = self.mean.prog.sort_domain(list(self.mean.domain) + list(self.log_std.domain) + list(domain))
        eps = R.normal(self.shape, domain=domain, dtype=self.mean.dtype)
        return named((self.mean + self.std * eps).detach(), "sample")

    @labelled("Normal")
    def log_prob(self, a):
        """The elementwise log-density of ``a`` (sum over the action axis yourself for a diagonal Gaussian)."""
        z = (a - self.mean) / self.std
        return named(-0.5 * z * z - self.log_std - _LOG_SQRT_2PI, "log_prob")

    @labelled("Normal")
    def entropy(self):
        """The elementwise entropy ``0.5 + log √(2π) + log_std``, broadcast to the mean's shape."""
        return named((0.5 + _LOG_SQRT_2PI + self.log_std) * ones_like(self.mean.detach()), "entropy")
