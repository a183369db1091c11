"""dreamd: a consolidation daemon that gives LLM chat companions a night's sleep."""

__version__ = "0.1.0"
