"""Flotilla: a batch job scheduler for ML and HPC platforms."""

__version__ = "0.1.0"
