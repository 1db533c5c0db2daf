"""iez: a control plane that balances Lustre stripe placement across OSTs and OSSs."""

__version__ = "0.1.0"
