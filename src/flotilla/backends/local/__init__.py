"""The local engine: runs a cluster's jobs as processes on this machine.

One module per concern: ``backend`` (the ``Backend`` the service calls), ``identity`` and
``accounts`` (which account a run uses), ``starting`` and ``spawn``/``supervise``/``job_init``
(how a batch starts), ``ending`` (how it stops and what it left), ``records`` (what survives a
restart), ``tree``/``cgroups``/``processes``/``run_lock`` (the run's processes and their
bounds), ``environment`` and ``private_mounts`` (what a job sees), ``outputs`` (its logs) and
``gpu_*`` (devices, sharing, telemetry).
"""
