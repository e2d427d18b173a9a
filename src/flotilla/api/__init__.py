"""The REST API's wire format, shared by the server and the SDK.

``schemas``: the request and response bodies (they make the OpenAPI schema); ``submission``:
the rules a job submission must pass, so a client checks a job file exactly as the server
will before sending it. Nothing here imports the server, FastAPI or the store, so the CLI and
the SDK start without them.
"""
