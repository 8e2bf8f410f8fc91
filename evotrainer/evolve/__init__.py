"""The loop's decisions over stored results: executing an intervention on a branch of its
own, the promotion gate, and the skills its verdicts accumulate. Work itself (training,
evaluation, diagnosis) goes through tasks; this package only reads the log and appends
what it decides.

    from evotrainer.evolve import fork_for_intervention, record_promotion
"""

from evotrainer.evolve.execute import ForkedIntervention, fork_for_intervention
from evotrainer.evolve.promotion import PromotionDecision, decide_promotion, incumbent_of, record_promotion
from evotrainer.evolve.skills import Skill, SkillLibrary, skill_library

__all__ = [
    "ForkedIntervention",
    "PromotionDecision",
    "Skill",
    "SkillLibrary",
    "decide_promotion",
    "fork_for_intervention",
    "incumbent_of",
    "record_promotion",
    "skill_library",
]
