"""OST allocation policies behind one interface (:class:`~iez.allocate.base.Policy`).

``make_policy(name, seed=...)`` builds one; :data:`POLICY_NAMES` lists them:

- ``iez``: bandwidth-first placement under a fill cap (the product's policy);
- ``paper``: Algorithm 2 of the paper as printed (shows the collapse onto few OSTs);
- ``rr`` and ``qos``: Lustre's round-robin and weighted (QoS) allocators;
- ``random``: uniform over usable OSTs, seeded;
- ``greedy``: size-aware list scheduling (largest file first, each object to the OST that finishes it
  soonest), the strongest simple baseline knowing what ``iez`` knows.
"""

from __future__ import annotations

from importlib import import_module

from iez.allocate.base import AllocationError, Placement, Policy, Refused, StripeRules

_POLICY_CLASSES = {
    "iez": ("iez.allocate.bandwidth", "BandwidthPolicy"),
    "paper": ("iez.allocate.paper", "PaperPolicy"),
    "rr": ("iez.allocate.lustre_rr", "RoundRobinPolicy"),
    "qos": ("iez.allocate.lustre_qos", "QosPolicy"),
    "random": ("iez.allocate.uniform", "RandomPolicy"),
    "greedy": ("iez.allocate.greedy", "GreedyPolicy"),
}

POLICY_NAMES = tuple(_POLICY_CLASSES)


def make_policy(name: str, seed: int = 0, **options) -> Policy:
    """A fresh policy instance; ``options`` go to the policy's constructor."""
    try:
        module, cls = _POLICY_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}") from None
    return getattr(import_module(module), cls)(seed=seed, **options)


__all__ = ["AllocationError", "Placement", "Policy", "Refused", "StripeRules", "POLICY_NAMES", "make_policy"]
