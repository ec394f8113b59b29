"""Benchmarks run by ``epto bench TOPIC``.

Each topic is a module ``epto.benchmarks.<topic>`` exposing
``add_arguments(parser)`` and ``run(args) -> int``; it prints figures, never
asserts them. Benchmarks may read clocks; the protocol core never does.
"""
