"""Published accuracies of fine-tuned variants (issue 34 item 3: accuracies cited, not invented).

GLUE dev-set scores of full fine-tuning (FT) and LoRA for RoBERTa-base and DeBERTa-v2-XXLarge, as
published by Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022, Table 2,
and in the README of github.com/microsoft/LoRA (the FT numbers there are taken from Liu et al.
2019 and He et al. 2020). Metrics: MNLI matched accuracy, SST-2/MRPC/QNLI/QQP/RTE accuracy,
CoLA Matthews correlation, STS-B Pearson correlation; divided by 100 here.

These are the only accuracies in the package that are measured by someone; the seeded LLM zoo
(``workloads.make_zoo``) keeps modelled ones and says so.
"""

from __future__ import annotations

from schedlab.core.errors import BadInputError

GLUE_TASKS = ("mnli", "sst2", "mrpc", "cola", "qnli", "qqp", "rte", "stsb")
SOURCE = ("Hu et al., LoRA, ICLR 2022, Table 2 / github.com/microsoft/LoRA README "
          "(GLUE dev, FT numbers from Liu et al. 2019 and He et al. 2020)")

#: (family, variant) -> score per GLUE_TASKS, in percent as published
GLUE_SCORES: dict[tuple[str, str], tuple[float, ...]] = {
    ("roberta-base", "ft"): (87.6, 94.8, 90.2, 63.6, 92.8, 91.9, 78.7, 91.2),
    ("roberta-base", "lora"): (87.5, 95.1, 89.7, 63.4, 93.3, 90.8, 86.6, 91.5),
    ("deberta-v2-xxlarge", "ft"): (91.8, 97.2, 92.0, 72.0, 96.0, 92.7, 93.9, 92.9),
    ("deberta-v2-xxlarge", "lora"): (91.9, 96.9, 92.6, 72.4, 96.0, 92.9, 94.9, 93.0),
}
#: the "Avg." column of the LoRA paper's Table 2 (one decimal), which the tests recompute from
#: the rows above (DeBERTa FT's MNLI is He et al.'s 91.8 for DeBERTa 1.5B, MNLI-m dev)
GLUE_AVERAGES = {("roberta-base", "ft"): 86.4, ("roberta-base", "lora"): 87.2,
                 ("deberta-v2-xxlarge", "ft"): 91.1, ("deberta-v2-xxlarge", "lora"): 91.3}


def glue_score(family: str, variant: str, task: str) -> float:
    """The published score (0..1) of ``family``'s ``variant`` ("ft" or "lora") on ``task``."""
    try:
        row = GLUE_SCORES[(family, variant)]
    except KeyError:
        raise BadInputError(f"no published GLUE scores for {family} {variant}; known: "
                            f"{', '.join(f'{f} {v}' for f, v in GLUE_SCORES)}",
                            field="family") from None
    if task not in GLUE_TASKS:
        raise BadInputError(f"unknown GLUE task {task!r}; valid: {', '.join(GLUE_TASKS)}",
                            field="task")
    return row[GLUE_TASKS.index(task)] / 100.0
