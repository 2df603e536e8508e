"""moeplan: plan, verify, show, export and run Mixture-of-Experts serving across many GPUs."""

__version__ = "0.1.0"
