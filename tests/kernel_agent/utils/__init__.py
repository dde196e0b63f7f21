"""The stand-in's half of KernelAgent's top-level `utils` package: its providers."""
