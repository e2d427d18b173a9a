"""The ``flotilla`` command line."""
