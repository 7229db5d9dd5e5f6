"""The node agent: stdlib only (plus the checkpoint rules of ``trainer.wire``), shipped to each node as a zip and run
there. It answers framed requests on stdin/stdout (``serve``), starts the job detached from the
channel, and reads, writes and stops on the launcher's behalf. Modules import each other relatively,
so the same files run as ``launcher.backends.agent`` here and as ``fsdp_tui_agent`` on a node."""
