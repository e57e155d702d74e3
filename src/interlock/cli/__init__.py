"""The ``interlock`` command line: LightningCLI-style configs plus chart, inspect and listeners tools.

The entry point is :func:`interlock.cli.main.main`.
"""
