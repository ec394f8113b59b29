"""Drivers that run the sans-IO core over a network (imported as ``epto.transports``)."""
