"""HFHeuristic: transformers' ``num_assistant_tokens_schedule="heuristic"`` (Mamou et al. 2024a).

Rule, as in ``AssistedCandidateGenerator.update_candidate_strategy``
(transformers 5.23, ``generation/candidate_generator.py``)::

    if num_matches == len(scores[0]) - 1:      # every *drafted* token accepted
        num_assistant_tokens += 2
    else:
        num_assistant_tokens = max(1, num_assistant_tokens - 1)

Facts checked in that source (see also ../shared/notes/transformers-assisted-generation.md):

* the comparison is against the number of tokens actually drafted in the round
  (``scores`` holds the target's ``candidate_length + 1`` logits), not against γ:
  a round cut short by the token budget, an EOS or the confidence stop that had
  all its tokens accepted still counts as a success (+2);
* there is **no upper cap** on γ; only the per-round draft length is capped by
  the remaining budget (``_calculate_new_tokens``), which is the loop's job here;
* a round with nothing drafted (``d == 0``, which transformers does when one token
  of budget is left) satisfies ``0 == 0`` and gets +2 there too; this policy does the
  same, so the γ carried to the next prompt matches when the loop reports such
  rounds;
* ``"heuristic"`` writes the final γ back to the assistant's
  ``generation_config`` at the end of ``generate()`` (``generation/utils.py``), so
  it carries into the next prompt; ``"heuristic_transient"`` starts each call
  from the configured value.
"""

from __future__ import annotations

from methods.base import GammaPolicy, RoundOutcome, policy
from specbench.config import check_bool


@policy("hf_heuristic")
class HFHeuristic(GammaPolicy):
    """+2 after a round whose drafted tokens were all accepted, else ``max(1, γ − 1)``.

    ``transient=True`` (default, transformers' ``"heuristic_transient"``): γ goes back to
    the initial γ at every ``begin_prompt()``, so the initial γ means the same for every
    prompt. ``transient=False`` (``"heuristic"``): γ persists across the
    prompts of a job, as transformers' write-back to the assistant's config.
    """

    name = "hf_heuristic"

    def __init__(self, gamma_init: int, transient: bool = True) -> None:
        super().__init__(gamma_init)
        self.transient = check_bool("transient", transient)
        self.reset()

    def reset(self) -> None:
        self.gamma = self.gamma_init
        self.rounds = 0

    def begin_prompt(self) -> None:
        if self.transient:
            self.gamma = self.gamma_init

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, outcome: RoundOutcome) -> None:
        self.rounds += 1
        # transformers: ``num_matches == candidate_length`` (d == 0 included, see module doc).
        # When an accepted drafted token is an EOS, transformers cuts the kept tokens at it and
        # reports one match fewer (the EOS counts as the target's own token): follow it.
        matches = outcome.accepted - int(outcome.eos_accepted)
        if matches == outcome.drafted:
            self.gamma += 2
        else:
            self.gamma = max(1, self.gamma - 1)

    def state(self) -> dict:
        return {"gamma": self.gamma, "transient": self.transient, "rounds": self.rounds}
