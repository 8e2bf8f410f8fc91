"""The loop's decisions over stored results: executing an intervention on a branch of its
own, and the promotion gate. Work itself (training, evaluation, diagnosis) goes through
tasks; this package only reads the log and appends what it decides.

    from evotrainer.evolve import fork_for_intervention, record_promotion
"""

from evotrainer.evolve.execute import ForkedIntervention, fork_for_intervention
from evotrainer.evolve.promotion import PromotionDecision, decide_promotion, incumbent_of, record_promotion

__all__ = [
    "ForkedIntervention",
    "PromotionDecision",
    "decide_promotion",
    "fork_for_intervention",
    "incumbent_of",
    "record_promotion",
]
