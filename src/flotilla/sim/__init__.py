"""The scenario simulator: the real scheduling engine over a virtual clock."""

from flotilla.sim.simulator import SimulationOptions, Simulator, simulate

__all__ = ["SimulationOptions", "Simulator", "simulate"]
