# Settings for the example API (see the README's config.py table for every name).
app_name = "example-api"
title = "Example API"
description = "Items behind a bearer token, with rate limiting and request logging in middleware.py."
version = "1.0.0"

server = {"host": "127.0.0.1", "port": 8000}
logging = {"level": "INFO", "production_level": "WARNING"}
sandbox = {"memory_mb": 128, "timeout_s": 10}

commands = {
    "hello": "echo hello from {host}:{port}",
    "smoke": "curl -s http://{host}:{port}/health",
}
