"""``torchrun ... -m trainer [PARAMS.yaml]``: supervised fine-tuning with FSDP2. Only orchestrates."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

from trainer.wire.protocol import RUN_ID_ENV


def load_config(argv: list[str]):
    """The parameters file (argument, else ``HYPERPARAMETERS_PATH``) as a validated config."""
    import yaml
    from pydantic import ValidationError

    from trainer.wire.config import TrainerConfig

    path = argv[0] if argv else os.environ.get("HYPERPARAMETERS_PATH")
    if not path:
        raise SystemExit("usage: torchrun ... -m trainer PARAMS.yaml (or set HYPERPARAMETERS_PATH)")
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        cfg = TrainerConfig.model_validate(data)
    except OSError as err:
        raise SystemExit(f"{path}: cannot read the parameters file: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise SystemExit(f"{path}: not valid YAML: {err}") from None
    except ValidationError as err:
        lines = [f"{path}: parameters.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise SystemExit("\n".join(lines)) from None
    # $FSDP_TUI_RUN_ID and ~ in paths: one output folder per run, shared by its retries.
    resume = cfg.checkpoint.resume
    ckpt = cfg.checkpoint.model_copy(update={"staging_dir": _expand(cfg.checkpoint.staging_dir),
                                             "resume": resume if resume in ("auto", "never") else _expand(resume)})
    return cfg.model_copy(update={"output_dir": _expand(cfg.output_dir), "checkpoint": ckpt})


def _expand(path: str | None) -> str | None:
    """``$NAME`` and ``~`` as the job sees them; ``file://`` is a path, another URL stays one."""
    from trainer.wire.ckpt_layout import expand_path

    return expand_path(path, dict(os.environ)) if path else path


@contextlib.contextmanager
def _start_up_without_gc():
    """No cyclic garbage collection while torch and transformers are imported and the model's config
    is read: the ~650k objects they allocate set off dozens of collections that find almost nothing
    (~10% of the import time measured). They live as long as the process, so they are then frozen
    (later collections skip them) and collection is back on before any data or weights are loaded."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def run(cfg, stop=None) -> None:
    """Train; ``stop`` (a :class:`trainer.loop.stop_signal.StopSignal`) ends the run early with a checkpoint."""
    import time

    # Progress bars are noise in node logs: off before tqdm and huggingface_hub read these at import.
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(name, "1")
    with _start_up_without_gc():
        import torch
        import torch.distributed as dist

        from trainer import (
            assets,
            attention,
            checkpoint,
            dataset,
            lora,
            metrics,
            model,
            optim,
            parallel,
            resume_facts,
            router_loss,
            samples,
            train,
        )
        from trainer.data.rows import GlobalOrder
        from trainer.wire.config import SettingError, torch_refusal

        if torch_refusal(torch.__version__):
            raise SettingError(torch_refusal(torch.__version__))
        from trainer.lora import qlora

        if qlora.refusal(cfg, torch.cuda.is_available()):
            raise SettingError(qlora.refusal(cfg, torch.cuda.is_available()))
        from trainer.model.learned_logits import install as learned_logits_only

        # Built-in assets are made before the process group exists: HF writes files only on rank 0 then.
        for name in (cfg.model_name, cfg.model.tokenizer or cfg.model_name):
            assets.resolve_model(name)
        hf_config = model.hf_config(cfg.model_name, cfg.model)
        device_kind = "cuda" if torch.cuda.is_available() else "cpu"
        support = model.attention_support(hf_config, cfg.model_name, cfg.model)
        router_coefficient, router_note = router_loss.choose(hf_config, cfg.model.router_aux_loss)
        choice = attention.choose(cfg, hf_config.to_dict(), support, torch.device(device_kind),
                                  router_coefficient is not None)
    d = parallel.init_distributed()
    torch.manual_seed(cfg.seed)
    started = time.perf_counter()
    tok = model.load_tokenizer(cfg.model_name, cfg.model)
    data = dataset.build(cfg, tok, choice.packing)
    data_s = time.perf_counter() - started
    try:
        order = GlobalOrder(len(data.train_rows), d.world, d.rank, cfg.per_device_batch_size, cfg.seed,
                            cfg.data.shuffle)
    except SettingError as err:  # too little data for one step
        raise SettingError(f"{cfg.dataset_name}: {err}") from None
    accum = cfg.gradient_accumulation_steps
    total = cfg.max_steps or max(1, order.batches_per_epoch * cfg.num_epochs // accum)
    compiled, compile_note = model.choose_compile(cfg.model.compile, d.device.type, total)
    chosen: list = []
    adapters = lora.Adapters(cfg.lora, cfg.seed, cfg.model_name) if cfg.lora is not None else None

    def prepare(net):
        if adapters is not None:
            net = adapters.apply(net)
        chosen.append(parallel.choose_sharding(cfg.fsdp, lora.state_params(net), d))
        model.apply_activation_checkpointing(net, cfg.model.activation_checkpointing)
        if compiled:
            model.apply_compile(net)
        return parallel.shard_model(net, cfg.fsdp.model_copy(update={"sharding": chosen[0].sharding}), d,
                                    chosen[0].per_block)

    if choice.per_example:
        from trainer.model import packed_sdpa

        packed_sdpa.register()
    if cfg.lora is not None and cfg.lora.quantize is not None:
        net = qlora.build(cfg, choice.hf_name, d, prepare, adapters)
    else:
        net = model.build_model(cfg.model_name, cfg.model, hf_config, choice.hf_name, cfg.seed,
                                parallel.param_device(cfg.fsdp, d), prepare, buffer_device=d.device, adapters=adapters)
    learned_logits_only(net)  # the output layer runs on learned positions only
    router_loss.keep(net, router_coefficient)
    shape = metrics.ModelShape.of(net)
    build_s = time.perf_counter() - started - data_s
    opt = optim.build_optimizer(net, cfg.learning_rate, cfg.optim, d.device)
    sched = optim.build_scheduler(opt, total, cfg.optim)
    state = {"step": 0, "epoch": 0, "position": 0, "per_global": order.per_global, "total_steps": total}
    app = lora.AdapterState(net, opt, sched, state) if adapters else checkpoint.AppState(net, opt, sched, state)
    ckpt = checkpoint.Checkpointer(cfg.checkpoint, cfg.output_dir, d, {
        "model_name": cfg.model_name, "tokenizer": cfg.model.tokenizer or cfg.model_name,
        "run_id": os.environ.get(RUN_ID_ENV, ""), **lora.checkpoint_meta(cfg)})
    proof = resume_facts.ResumeWatch(order=order, rows=data.train_rows, accum=accum, seed=cfg.seed,
                                     sharding=chosen[0].sharding, dataset=cfg.dataset_name,
                                     run_id=os.environ.get(RUN_ID_ENV) or None, epoch_counted=not cfg.max_steps,
                                     is_main=d.is_main, scheduler=sched,
                                     continues=tuple(cfg.checkpoint.resume_runs))  # what a resume must continue
    ckpt.resume_facts = lambda: proof.record(state)
    resume = ckpt.resume_path()
    if resume is not None:
        ckpt.load(app, resume)
        if state["per_global"] != order.per_global:
            state["position"] = GlobalOrder.rescale(state["position"], state["per_global"], order.per_global)
            state["per_global"] = order.per_global
        if not cfg.max_steps and state.get("total_steps", total) != total:
            # Another world size: the same share of the data done, the same point of the LR curve.
            state["step"] = state["step"] * total // state["total_steps"]
            optim.move_schedule(sched, state["step"])
        state["total_steps"] = total
        proof.resumed(ckpt.loaded_meta, state)
        if d.is_main:
            print(f"resumed from {resume} at step {state['step']}", flush=True)
        if state["step"] >= total:  # a finished run started again: its checkpoint and export are there
            if d.is_main:
                print(f"nothing to train: {resume} is step {state['step']} of {total}; nothing is written "
                      "(raise max_steps or num_epochs to train further)", flush=True)
            ckpt.close()
            dist.barrier()
            dist.destroy_process_group()
            return

    log = metrics.MetricsLogger(d, shape, total, metrics.peak_flops(d, cfg.logging.peak_tflops))
    if d.is_main:
        for note in (*choice.notes, *data.notes, router_note, chosen[0].note, compile_note,
                     adapters and adapters.summary(net), optim.decay_note(opt)):
            if note:
                print(note, flush=True)
        print(f"data: {data.summary.words()}", flush=True)
        log.data(data.summary)
        print(f"training {cfg.model_name}: {shape.num_params / 1e6:.2f}M params, {d.world} ranks, "
              f"{len(data.train_rows)} rows ({data.fmt}{', packed' if choice.packing else ''}), "
              f"{total} steps; start-up: data {data_s:.1f} s, model {build_s:.1f} s", flush=True)

    def run_eval(max_batches: int | None) -> None:
        if not data.eval_rows:
            return
        start = time.perf_counter()
        batches = dataset.eval_batches(data.eval_rows, d.rank, d.world, cfg.per_device_batch_size, data.pad_id,
                                       max_batches)
        loss, exact = train.evaluate(net, batches, d.device, with_exact_match=data.fmt == "squad")
        log.eval(state["step"], loss, exact, time.perf_counter() - start)

    sampler = samples.build(cfg, tok, data, d, hf_config)

    def run_samples() -> None:
        if sampler is not None and sampler.due(state["step"], total):
            log.exclude(sampler.run(net, state["step"]))

    if state["step"] == 0:
        run_eval(dataset.first_eval_batches(cfg.logging.eval_max_batches))
        run_samples()
    learned = train.learned_counts(data.train_rows)  # each global batch's loss denominator, counted here
    # What start-up built lives for the whole run: collections during training skip it (unfrozen, the
    # first full collection walked it inside the first step: +0.3 s of a 0.3 s step, tiny model).
    gc.freeze()
    loop_start, start_step, real_tokens, excluded_before = time.perf_counter(), state["step"], 0, log.excluded_s
    stopped = False
    watch = model.CompileWatch() if compiled else None

    def staged() -> None:  # an async save's copy is done before the optimiser changes the weights
        blocked = ckpt.wait_staged()
        if blocked is not None:
            log.checkpoint_blocked(*blocked)

    while state["step"] < total:
        if not cfg.max_steps and state["epoch"] >= cfg.num_epochs:
            break
        if stop is not None and stop.agreed():
            stopped = True
            break
        with log.clock.step():
            batches, state["epoch"], state["position"], count = train.micro_batches(
                order, data.train_rows, state["epoch"], state["position"], accum, data.pad_id, learned)
            result = train.train_step(net, opt, sched, batches, d.device, cfg.optim.max_grad_norm, d.world,
                                      staged, log.clock, count)
        state["step"] += 1
        real_tokens += result.real_tokens
        news = watch.news(state["step"]) if watch is not None else None
        if news and d.is_main:
            print(news, flush=True)
        log.add_batches(batches)
        step = state["step"]
        loss = None
        if step % cfg.logging.every_steps == 0 or step == total:
            epoch = state["epoch"] + state["position"] / max(1, order.batches_per_epoch)
            loss = log.train_step(step, epoch, result)
            proof.logged(loss)
        checked = proof.first_step(result, loss)
        if checked is not None:
            log.resume_check(checked)
        if cfg.logging.eval_every_steps and step % cfg.logging.eval_every_steps == 0 and step != total:
            run_eval(cfg.logging.eval_max_batches)
        if step != total:
            run_samples()
        if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0 and step != total:
            submit_s = ckpt.save(app, step)
            log.exclude(submit_s)
            if not cfg.checkpoint.async_save:  # an async save is said with its wait, before the next update
                log.checkpoint_blocked(submit_s)
    excluded = log.excluded_s - excluded_before
    seconds = time.perf_counter() - loop_start - excluded
    counted = torch.tensor([float(real_tokens)])
    dist.all_reduce(counted)
    if d.is_main:
        print(f"train_summary steps={state['step'] - start_step} real_tokens={int(counted.item())} "
              f"seconds={seconds:.2f} tokens_per_s={counted.item() / max(seconds, 1e-9):.0f} "
              f"eval_and_checkpoint_s={excluded:.2f}", flush=True)
    if stopped:  # the job's time is nearly up: a checkpoint to resume from, no final eval or export
        ckpt.save_once(app, state["step"])
    else:
        run_eval(cfg.logging.eval_max_batches)
        run_samples()
        if cfg.checkpoint.save_final:
            ckpt.save(app, state["step"])
    ckpt.close()  # an async save is complete and finalised from here on
    if stopped:
        if d.is_main:
            print(stop.stopping_line(state["step"]), flush=True)
        log.signal_checkpoint(state["step"], stop.signal_name)
    elif adapters is not None and (cfg.checkpoint.export_hf or cfg.checkpoint.export_merged):
        from trainer.lora import export as lora_export

        lora_export.export_in_job(net, tok, cfg, Path(cfg.output_dir) / "hf" / f"step-{state['step']:08d}", d)
    elif cfg.checkpoint.export_hf:
        out = checkpoint.export_hf(net, tok, cfg.output_dir, f"step-{state['step']:08d}", d)
        if out is not None:
            print(f"exported Hugging Face model to {out}", flush=True)
    log.close()
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    import signal

    # Every thread's stack to the node's log on SIGUSR2: the launcher's stack dump where py-spy is missing.
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    from trainer.loop import stop_signal

    stop = stop_signal.install()  # before anything slow: a signal during start-up waits for the first step
    with _start_up_without_gc():
        cfg = load_config(list(sys.argv[1:] if argv is None else argv))
    from trainer.wire.config import SettingError  # imported by load_config

    try:
        run(cfg, stop)
    except SettingError as err:  # found alike on every rank (one at the first forward pass)
        raise SystemExit(str(err)) from None
    return 0


def _exit_without_teardown(code: int) -> None:
    """End the process as ``sys.exit`` would, minus the interpreter's teardown of torch, transformers
    and their extensions (1-2.5 s measured on a 2-core machine, during which torchrun waits). Every
    ``atexit`` handler still runs (logging, DCP, ...) and the standard streams are flushed; with a
    non-daemon thread still running the ordinary exit is taken, which waits for it."""
    import atexit
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    _exit_without_teardown(main())
