"""``flotilla replay``: a scenario played against a live service in wall time.

The plan (``plan.py``) turns a scenario into a fleet document of ``sim`` clusters and a
timeline of submissions and cancels, scaled by a speed; the driver (``driver.py``) plays it
through the SDK client and waits for the jobs to end; the report (``report.py``) is
``flotilla simulate``'s JSON report built from what the service recorded, so the two can be
compared job by job (``tests/parity/``).
"""
