"""Streaming connections shared by the agent and the API server, as apimachinery's util/httpstream is
shared upstream: HTTP/1.1 upgrades proxied byte for byte (`upgrade.py`), the SPDY/3.1 client session
remotecommand needs (`spdy.py`), and the channel numbers of the WebSocket and SPDY remotecommand
protocols (`protocols.py`), and the headers a reverse proxy drops between hops (`headers.py`)."""
