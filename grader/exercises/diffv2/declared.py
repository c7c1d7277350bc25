"""The parts the checks of DIFF V2 share in their declarations (see :func:`grader.core.plugin.check`): the calls
the handout replays, as (case set, with a backward pass)."""

from __future__ import annotations

from grader.exercises.diffv2 import suite

GQA_OUTPUT_CALLS = ((suite.gqa_causal, False), (suite.gqa_noncausal, False))
DIFF_OUTPUT_CALLS = ((suite.diff_causal, False), (suite.diff_noncausal, False))
GRADIENT_CALLS = ((suite.gqa_gradients, True), (suite.diff_gradients, True))
DIFF_GRADIENT_CALLS = ((suite.diff_gradients, True),)
