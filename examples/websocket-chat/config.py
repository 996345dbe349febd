# Every open WebSocket (and every streamed response, like the room's event stream) holds a
# sandbox instance for its whole life, and a project may have at most `max_streams` of them open
# (half of `workers` unless set). A chat keeps its connections open, so this example allows
# 48 at once, out of 64 instances. Idle instances cost memory only: see the README's WebSockets
# section for what one costs.
server = {"workers": 64}
sandbox = {"max_streams": 48}
