"""Eject: the same workload as another engine runs it, for the day a job must move there.

Pure functions from a :class:`~launcher.workload.plan.RunPlan` to text, one module per engine:
``kubeflow`` (a Kubeflow Trainer v2 ``TrainJob``), ``jobset`` (a Kubernetes ``JobSet``), ``skypilot`` (a
SkyPilot task YAML) and ``sbatch`` (the batch script the SLURM backend submits, from
:mod:`launcher.backends.slurm.script` itself). ``job`` holds what they share: the workload read once as
any engine needs it, and the node script that gives the job the node contract's variables there.
:mod:`launcher.eject.targets` names the engines. Each rendering says what the engine cannot express
(the agent, the live panes, hosts pinning...); nothing here reaches a node or a cluster.

Import rules: above ``backends`` (the batch script), beside ``doctor``; nothing here imports a run's
records or anything that talks to a machine.
"""
