"""The built-in FSDP2 trainer for Hugging Face causal LMs (runs on the nodes, under torchrun)."""
