"""Readers of public traces that two or more systems use, one module per format.

Why a neutral package: no system may import another, so a trace format that gPooling and
CouchSurfer (or several LLM systems) both read lives here, and each system imports it from
here. A reader takes a path and fails with one line naming file, line and field.

- :mod:`.alibaba_gpu2023`: Alibaba ``cluster-trace-gpu-v2023`` node list and pod list.
- :mod:`.alibaba_genai`: Alibaba ``cluster-trace-v2026-GenAI`` request trace.
"""
