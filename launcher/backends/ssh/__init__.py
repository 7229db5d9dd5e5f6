"""Nodes over SSH (asyncssh): the one ``~/.ssh/config`` reader, host-key-verified connections, trust,
and the agent channel that survives dropped connections."""
