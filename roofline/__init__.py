"""roofline: how many bytes each decoded token reads, and what that means for tok/s."""

__version__ = "0.1.0"
