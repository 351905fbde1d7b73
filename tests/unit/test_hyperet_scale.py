"""Pieces of the GPU study that can be checked on the CPU: the structured closed form used as a peer."""

import pytest
import torch

from companion.hyperet.study import STRUCTURES, _coef, structured_closed_form
from companion_kernels.hra import closed_form


@pytest.mark.parametrize("kind", list(STRUCTURES))
def test_structured_closed_form_equals_dense(kind):
    k = STRUCTURES[kind]
    w0 = torch.randn(3, 7, 16, dtype=torch.float64)
    coef = _coef(3, k, 16, kind, "cpu").double() + 0.1 * torch.randn(3, k, 16, dtype=torch.float64)
    torch.testing.assert_close(structured_closed_form(w0, coef, kind), closed_form(w0, coef, kind), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("change, name", [({"width": 3}, "alignment"), ({"pretrain_level": "family"}, "pretrain_level"),
                                          ({"lr": 0.0}, "lr")])
def test_alignment_stage_refuses_a_bad_profile_before_training(change, name):
    from companion.core import ParameterError
    from companion.core.stages import StageContext
    from companion.hyperet.scale import SMOKE_PROFILE
    from companion.hyperet.study import alignment

    profile = {**SMOKE_PROFILE, "alignment": {**SMOKE_PROFILE["alignment"], **change}}
    with pytest.raises(ParameterError, match=name):
        alignment(StageContext(profile=profile, device="cpu", log=print, results={}))
