import os

# Prefect's temporary server can be slow to start on a fresh database (ENVIRONMENT.md).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
