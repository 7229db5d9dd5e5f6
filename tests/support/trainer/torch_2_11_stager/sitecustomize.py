"""Put on ``PYTHONPATH``: torch's ``DefaultStager`` behaves as on torch 2.11, whatever torch this is:
it closes its ``StateDictStager`` after every stage (which empties the copier's type table and drops
its host buffers), so a stager kept for a run fails at its second save."""

from torch.distributed.checkpoint.staging import DefaultStager

_stage = DefaultStager._stage


def _stage_then_close(self, state_dict, **kwargs):
    out = _stage(self, state_dict, **kwargs)
    self._state_dict_stager.close()
    return out


DefaultStager._stage = _stage_then_close
