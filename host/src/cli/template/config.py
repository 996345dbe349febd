# filerouter settings. Every name is optional; these are the defaults.
# This file runs inside the sandbox: plain assignments only.

app_name = "filerouter app"
title = "filerouter app"
description = ""
version = "0.1.0"
debug = True
docs_enabled = True

server = {"host": "127.0.0.1", "port": 8000, "queue": 256}  # "workers": 2 per core
logging = {"level": "info", "production_level": "warning"}
build = {"cache_dir": ".cache", "compression_level": 6}
sandbox = {"memory_mb": 256, "cpu_ms": 30000, "wall_s": 30, "max_body_bytes": 10 * 1024 * 1024}
commands = {}

# Secrets stay out of the source: declare their names here, give the values in the server's
# environment or in .env (not committed), and read them in a handler with `filerouter.env`.
environment = {"names": [], "optional": []}
# Settings of your own, read anywhere as `filerouter.settings["name"]`.
settings = {}
# Other HTTP services route code may call (`from filerouter import http`, or urllib.request):
# origins such as "https://api.stripe.com" or "https://*.example.com"; nothing by default.
outbound = {"allow": []}
