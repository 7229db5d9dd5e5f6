"""The run's steps in order: each step's micro-batches and update, then what its cadence asks for (a
metrics line, an evaluation, samples, a checkpoint), the stop a scheduler's warning asks for, and the end
(a final evaluation, samples and save, or the checkpoint to resume from).

Its parts come as types (:mod:`trainer.loop.parts`); the checkpoints and the resume's proof by the
protocols there (this room never imports checkpoints), the step counter as the
:class:`trainer.loop.state.TrainState` a checkpoint keeps.
"""

from __future__ import annotations

import gc
import time

import torch
import torch.distributed as dist

from trainer.data import dataset
from trainer.loop import train
from trainer.loop.nonfinite import NanGuard
from trainer.loop.parts import Around, Data, Trained
from trainer.loop.state import TrainState
from trainer.model.build import CompileWatch
from trainer.parallel import Dist
from trainer.wire.config import TrainerConfig


class Steps:
    """Owns the step counter's progress (``state``, the :class:`TrainState` a checkpoint keeps) and the
    cadence of everything between two steps."""

    def __init__(self, cfg: TrainerConfig, model: Trained, data: Data, state: TrainState, around: Around,
                 d: Dist) -> None:
        self.cfg, self.state, self.d = cfg, state, d
        self.net, self.optimizer, self.scheduler, self.compiled = (model.net, model.optimizer, model.scheduler,
                                                                   model.compiled)
        self.data, self.order, self.total = data.rows, data.order, data.total
        self.log, self.saves, self.proof, self.sampler = around.log, around.saves, around.proof, around.sampler
        self.nan = NanGuard(cfg.training.on_nan, d, self.log, self.saves, cfg.logging.every_steps)
        """What ``training.on_nan`` does (:mod:`trainer.loop.nonfinite`)."""

    def evaluate(self, max_batches: int | None) -> None:
        """The held-out loss (and exact match for squad) at this step, when there are held-out rows."""
        if not self.data.eval_rows:
            return
        start = time.perf_counter()
        d = self.d
        batches = dataset.eval_batches(self.data.eval_rows, d.rank, d.world, self.cfg.per_device_batch_size,
                                       self.data.pad_id, max_batches)
        limit = self.cfg.logging.eval_max_s
        bounded = _Bounded(batches, start + limit) if limit is not None else None
        loss, exact = train.evaluate(self.net, bounded or batches, d.device, with_exact_match=self.data.fmt == "squad")
        if bounded is not None and bounded.stopped and d.is_main:
            print(f"evaluation stopped after {bounded.done} batches: logging.eval_max_s is {limit:g} s", flush=True)
        self.log.eval(self.state.step, loss, exact, time.perf_counter() - start)

    def sample(self) -> None:
        """The model's answers, when this step is due for them (their time is left out of throughput)."""
        if self.sampler is not None and self.sampler.due(self.state.step, self.total):
            self.log.exclude(self.sampler.run(self.net, self.state.step))

    def _staged(self) -> None:
        """An async save's copy is done before the optimiser changes the weights."""
        blocked = self.saves.wait_staged()
        if blocked is not None:
            self.log.checkpoint_blocked(*blocked)

    def run(self, stop=None) -> bool:
        """Every step left, from a new run's first evaluation to the throughput summary; ``True`` when
        ``stop`` (a :class:`trainer.loop.stop_signal.StopSignal`) ended the run early."""
        cfg, state, log, d, total = self.cfg, self.state, self.log, self.d, self.total
        at = state.data
        if state.step == 0:
            self.evaluate(dataset.first_eval_batches(cfg.logging.eval_max_batches))
            self.sample()
        learned = self.data.learned_counts()  # each global batch's loss denominator, counted here
        # What start-up built lives for the whole run: collections during training skip it (unfrozen, the
        # first full collection walked it inside the first step: +0.3 s of a 0.3 s step, tiny model).
        gc.freeze()
        loop_start, start_step, real_tokens, excluded_before = time.perf_counter(), state.step, 0, log.excluded_s
        stopped = False
        watch = CompileWatch() if self.compiled else None
        accum = cfg.gradient_accumulation_steps
        while state.step < total:
            if not cfg.max_steps and at.epoch >= cfg.num_epochs:
                break
            if stop is not None and stop.agreed():
                stopped = True
                break
            with log.clock.step():
                batches, at.epoch, at.position, count = train.micro_batches(
                    self.order, self.data.train_rows, at.epoch, at.position, accum, self.data.pad_id, learned)
                self.order.note(at)  # a stream's position, for the checkpoints that follow
                result = train.train_step(self.net, self.optimizer, self.scheduler, batches, d.device,
                                          cfg.optim.max_grad_norm, d.world, self._staged, log.clock, count,
                                          self.nan.skip_check(state.step + 1))
            state.step += 1
            real_tokens += result.real_tokens
            news = watch.news(state.step) if watch is not None else None
            if news and d.is_main:
                print(news, flush=True)
            log.add_batches(batches)
            self._after_step(result)
        excluded = log.excluded_s - excluded_before
        seconds = time.perf_counter() - loop_start - excluded
        counted = torch.tensor([float(real_tokens)])
        dist.all_reduce(counted)
        if d.is_main:
            print(f"train_summary steps={state.step - start_step} real_tokens={int(counted.item())} "
                  f"seconds={seconds:.2f} tokens_per_s={counted.item() / max(seconds, 1e-9):.0f} "
                  f"eval_and_checkpoint_s={excluded:.2f}", flush=True)
        return stopped

    def _after_step(self, result: train.StepResult) -> None:
        """What this step's number asks for: a metrics record, the resume's check, an evaluation, samples, a
        checkpoint (the last step's are the end's)."""
        cfg, log, step, total, at = self.cfg, self.log, self.state.step, self.total, self.state.data
        loss = None
        if step % cfg.logging.every_steps == 0 or step == total:
            epoch = at.epoch + at.position / max(1, self.order.batches_per_epoch)
            loss = log.train_step(step, epoch, result, self.order.source_counts(at.epoch, at.position))
            self.nan.logged(step, log.rank_loss_sums)
            self.proof.logged(loss)
        checked = self.proof.first_step(result, loss)
        if checked is not None:
            log.resume_check(checked)
        if cfg.logging.eval_every_steps and step % cfg.logging.eval_every_steps == 0 and step != total:
            self.evaluate(cfg.logging.eval_max_batches)
        if step != total:
            self.sample()
        if cfg.checkpoint.every_steps and step % cfg.checkpoint.every_steps == 0 and step != total:
            self.nan.before_save(self.net, step, result.loss_sum)
            submit_s = self.saves.save(step)
            log.exclude(submit_s)
            if not cfg.checkpoint.async_save:  # an async save is said with its wait, before the next update
                log.checkpoint_blocked(submit_s)

    def finish(self, stopped: bool, stop=None) -> None:
        """The end of the steps: a stopped run saves the checkpoint to resume from (no final evaluation);
        a finished one evaluates, samples and saves its final checkpoint as asked. Every save is complete
        and finalised on return."""
        step = self.state.step
        if stopped:  # the job's time is nearly up: a checkpoint to resume from, no final eval or export
            if self.saves.saved_step != step:
                self.nan.before_save(self.net, step, None)
            self.saves.save_once(step)
        else:
            self.evaluate(self.cfg.logging.eval_max_batches)
            self.sample()
            if self.cfg.checkpoint.save_final:
                self.nan.before_save(self.net, step, None)
                self.saves.save(step)
        self.saves.close()  # an async save is complete and finalised from here on
        if stopped:
            if self.d.is_main:
                print(stop.stopping_line(step), flush=True)
            self.log.signal_checkpoint(step, stop.signal_name)


class _Bounded:
    """Evaluation batches until ``deadline`` (``time.perf_counter``) passes on any rank, the first always:
    the ranks agree before each later batch, so every rank runs the same batches (FSDP needs every rank
    in every forward)."""

    def __init__(self, batches, deadline: float) -> None:
        self.batches, self.deadline = batches, deadline
        self.done, self.stopped = 0, False

    def __iter__(self):
        for batch in self.batches:
            if self.done:
                late = torch.tensor([1.0 if time.perf_counter() > self.deadline else 0.0])
                dist.all_reduce(late, op=dist.ReduceOp.MAX)
                if late.item():
                    self.stopped = True
                    return
            self.done += 1
            yield batch
