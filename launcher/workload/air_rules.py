"""The rules ``air`` itself applies to its own fields (exclusions, formats), the warnings for the fields
that only mean something on Databricks, and the two ``air`` forms that need reading: dependencies from a
requirements file and a Quartz schedule turned into a crontab line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path as FsPath

import yaml

from launcher.workload.model import Workload
from launcher.workload.topology import Finding

_TASK_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_GIT_REF = re.compile(r"^[\w./-]+$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_IGNORED = "is a Databricks setting: fsdp-tui accepts it and ignores it"
_PRINCIPALS = ("user_name", "group_name", "service_principal_name")


def check_air(w: Workload, base_dir: FsPath | None, source: FsPath | None = None) -> list[Finding]:
    """Every ``air``-only field checked by ``air``'s own rules, and each ignored one said once."""
    out = _run_fields(w) + _environment(w, base_dir) + _snapshot(w)
    out += _ignored(w)
    if w.schedule is not None:
        out.append(_schedule(w, source))
    return out


def _run_fields(w: Workload) -> list[Finding]:
    out: list[Finding] = []
    if w.idempotency_token is not None:
        token = w.idempotency_token.strip()
        if not token or len(token) > 64:
            out.append(Finding(("idempotency_token",), "error", "idempotency_token must be 1-64 characters"))
    if w.mlflow_run_name is not None:
        name = w.mlflow_run_name.strip()
        if not name or len(name) > 100 or not _TASK_KEY.match(name):
            out.append(Finding(("mlflow_run_name",), "error", f"'{w.mlflow_run_name}' is not a valid MLflow run "
                               "name", "1-100 letters, digits, '_' or '-'"))
        if w.mlflow.run_name is not None:
            out.append(Finding(("mlflow_run_name",), "error", "both mlflow.run_name and mlflow_run_name are set",
                               "keep one of them"))
    if w.usage_policy_name is not None and w.usage_policy_id is not None:
        out.append(Finding(("usage_policy_id",), "error", "usage_policy_name and usage_policy_id are mutually "
                           "exclusive", "set only one"))
    if w.usage_policy_name is not None and not 0 < len(w.usage_policy_name.strip()) <= 127:
        out.append(Finding(("usage_policy_name",), "error", "usage_policy_name must be 1-127 characters"))
    if w.usage_policy_id is not None and not _UUID.match(w.usage_policy_id.strip()):
        out.append(Finding(("usage_policy_id",), "error", f"'{w.usage_policy_id}' is not a UUID",
                           "to name a policy, use usage_policy_name"))
    if w.mlflow_experiment_directory is not None and not w.mlflow_experiment_directory.strip().startswith(
            "/Workspace"):
        out.append(Finding(("mlflow_experiment_directory",), "error", "mlflow_experiment_directory must start "
                           "with '/Workspace'"))
    if w.mlflow_artifact_location is not None:
        where = w.mlflow_artifact_location.strip()
        if not (where.startswith("dbfs:/") or where.startswith("/Volumes/")):
            out.append(Finding(("mlflow_artifact_location",), "error", "mlflow_artifact_location must be a dbfs:/ "
                               "URI or a /Volumes/ path"))
    for i, grant in enumerate(w.permissions or ()):
        named = [p for p in _PRINCIPALS if getattr(grant, p) is not None]
        if len(named) != 1:
            out.append(Finding(("permissions", i), "error", "a permission names exactly one of "
                               + ", ".join(_PRINCIPALS), f"it names {len(named)}"))
        elif not str(getattr(grant, named[0])).strip():
            out.append(Finding(("permissions", i, named[0]), "error", f"{named[0]} is empty"))
        if not grant.level.strip():
            out.append(Finding(("permissions", i, "level"), "error", "level is empty", "e.g. CAN_VIEW"))
    return out


def _environment(w: Workload, base_dir: FsPath | None) -> list[Finding]:
    env, out = w.environment, []
    image = env.docker_image
    if image is not None:
        clash = [k for k in ("dependencies", "version") if k in env.model_fields_set]
        if clash:
            out.append(Finding(("environment", "docker_image"), "error", "with docker_image, "
                               f"{' and '.join(clash)} cannot be set: the image pins the whole runtime",
                               f"remove environment.{clash[0]}, or the image"))
        if (image.credentials_scope is None) != (image.credentials_key is None):
            out.append(Finding(("environment", "docker_image"), "error", "credentials_scope and "
                               "credentials_key go together"))
        elif image.credentials_scope is not None and image.tag_policy != "latest":
            out.append(Finding(("environment", "docker_image", "credentials_scope"), "error",
                               "registry credentials apply with tag_policy: latest only"))
        if w.command is None:
            out.append(Finding(("environment", "docker_image"), "error", "docker_image runs the workload's "
                               "command: the built-in trainer runs without one", "add a command, or remove "
                               "docker_image"))
    if isinstance(env.dependencies, str):
        _deps, problem = read_dependencies(env.dependencies, base_dir)
        if problem:
            out.append(Finding(("environment", "dependencies"), "error", problem,
                               "paths are relative to the workload file; one requirement per line"))
    return out


def _snapshot(w: Workload) -> list[Finding]:
    if w.code_source is None:
        return []
    snap, out = w.code_source.snapshot, []
    at = ("code_source", "snapshot")
    if snap.include_paths is not None:
        if not snap.include_paths:
            out.append(Finding((*at, "include_paths"), "error", "include_paths is empty",
                               "list the paths to upload, or leave it out to upload everything"))
        for i, path in enumerate(snap.include_paths):
            text = path.strip()
            if not text or text.startswith("/") or ".." in text.split("/"):
                out.append(Finding((*at, "include_paths", i), "error", f"'{path}' is not a path inside root_path",
                                   "a relative path, without '..'"))
    git = snap.git
    if git is not None:
        if (git.branch is None) == (git.commit is None):
            out.append(Finding((*at, "git"), "error", "git needs exactly one of branch and commit"))
        if git.branch is not None and not _GIT_REF.match(git.branch):
            out.append(Finding((*at, "git", "branch"), "error", f"'{git.branch}' is not a branch name"))
        if git.commit is not None and not _GIT_REF.match(git.commit):
            out.append(Finding((*at, "git", "commit"), "error", f"'{git.commit}' is not a revision"))
        if git.remote not in (False, ""):
            name = git.remote if isinstance(git.remote, str) else "the branch's upstream remote, else origin"
            what = f"branch '{git.branch}'" if git.branch is not None else f"commit '{git.commit}'"
            out.append(Finding((*at, "git", "remote"), "warning", f"the {what} is fetched from {name} when the run "
                               "is launched, and what that remote has ships (commits not pushed do not)",
                               "git.remote: false ships your local clone's " + ("branch" if git.branch else "commit")))
    if snap.remote_volume is not None and not snap.remote_volume.startswith("/Volumes/"):
        out.append(Finding((*at, "remote_volume"), "error", "remote_volume must start with '/Volumes/'"))
    return out


def _ignored(w: Workload) -> list[Finding]:
    fields = [(("mlflow_experiment_directory",), w.mlflow_experiment_directory),
              (("mlflow_artifact_location",), w.mlflow_artifact_location),
              (("permissions",), w.permissions), (("usage_policy_name",), w.usage_policy_name),
              (("usage_policy_id",), w.usage_policy_id), (("compute", "node_pool_id"), w.compute.node_pool_id),
              (("compute", "pool_name"), w.compute.pool_name)]
    if w.code_source is not None:
        fields.append((("code_source", "snapshot", "remote_volume"), w.code_source.snapshot.remote_volume))
    return [Finding(path, "warning", f"{path[-1]} {_IGNORED}") for path, value in fields if value is not None]


def read_dependencies(path: str, base_dir: FsPath | None) -> tuple[list[str], str]:
    """The requirements of ``environment.dependencies: FILE``: a pip requirements file (one requirement a
    line, ``#`` comments), or ``air``'s YAML form (``dependencies: [...]``); ``("", problem)`` if unusable."""
    file = (FsPath(base_dir or ".") / path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = "no such file" if isinstance(err, FileNotFoundError) else getattr(err, "strerror", None) or str(err)
        return [], f"cannot read the requirements file '{file}': {why}"
    if file.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            return [], f"'{file}' is not valid YAML: {str(err).splitlines()[0]}"
        deps = data.get("dependencies") if isinstance(data, dict) else data
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            return [], f"'{file}' has no 'dependencies:' list of requirement strings"
        return list(deps), ""
    deps = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            return [], f"{file}:{number}: pip options ('{line.split()[0]}') are not supported here: list requirements only"
        deps.append(line)
    return deps, ""


_DOW = {"1": "0", "2": "1", "3": "2", "4": "3", "5": "4", "6": "5", "7": "6"}


def quartz_to_cron(expression: str) -> str | None:
    """``0 30 9 ? * MON-FRI`` -> ``30 9 * * MON-FRI``; ``None`` where cron has no equivalent (seconds
    other than 0, a year, ``L``, ``W``, ``#``)."""
    parts = expression.split()
    if len(parts) not in (6, 7) or parts[0] != "0" or (len(parts) == 7 and parts[6] not in ("*", "?")):
        return None
    minute, hour, dom, month, dow = parts[1:6]
    if any(ch in field for field in (dom, dow) for ch in "LW#"):
        return None
    dom = "*" if dom == "?" else dom
    dow = "*" if dow == "?" else re.sub(r"\b[1-7]\b", lambda m: _DOW[m.group(0)], dow)
    return f"{minute} {hour} {dom} {month} {dow}"


def _schedule(w: Workload, source: FsPath | None) -> Finding:
    s = w.schedule
    assert s is not None
    cron = quartz_to_cron(s.quartz_cron_expression)
    file = shlex.quote(str(source)) if source is not None else "WORKLOAD.yaml"
    where = shlex.quote(str(source.parent)) if source is not None else "."
    paused = " (it is PAUSED: leave the line commented out)" if s.pause_status == "PAUSED" else ""
    if cron is None:
        how = (f"'{s.quartz_cron_expression}' has no crontab equivalent; a systemd timer's OnCalendar= can say "
               f"it, running: fsdp-tui run {file} --json")
    else:
        how = (f"a crontab line that runs it{paused}: CRON_TZ={s.timezone_id} {cron} cd {where} && "
               f"fsdp-tui run {file} --json >> fsdp-tui-schedule.log 2>&1")
    return Finding(("schedule",), "warning", "fsdp-tui does not run schedules", how)
