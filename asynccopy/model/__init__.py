"""The pipeline model: the simulator (``asynccopy.model.simulate``), the planner built on it
(``asynccopy.model.planner``), and the fitting of a kernel's own costs from its traces
(``asynccopy.model.costs``). Pure Python on device facts; no GPU needed."""

from .planner import Operand, Plan, plan
from .simulate import KernelCosts, Simulation

__all__ = ["KernelCosts", "Operand", "Plan", "Simulation", "plan"]
