"""domainbert: adapt BERT-family encoders to a specialist domain.

Stages: continued masked-LM pretraining (DAPT/TAPT), fine-tuning, distillation and
deployment, all driven by LightningCLI configs (``domainbert fit --config ...``).
"""

from domainbert.core.quiet import quiet_imports
from domainbert.errors import DomainBertError

quiet_imports()  # Lightning's tips and known library warnings: the Python API is as quiet as the commands

__all__ = ["DomainBertError"]
__version__ = "0.2.0.dev0"
