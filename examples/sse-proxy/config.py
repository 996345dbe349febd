# A streamed outbound response passed on to the browser as Server-Sent Events.
# `upstream` is the service whose streamed body (one token per line) the route reads;
# outbound["allow"] must list its origin.
app_name = "sse-proxy"
title = "SSE proxy"
outbound = {"allow": ["http://127.0.0.1:9000"]}
settings = {"upstream": "http://127.0.0.1:9000/tokens"}
