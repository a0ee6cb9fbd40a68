"""Training: SFT data (sft_data), the weighted think-loss (think_loss) and the SFT trainer (sft).

Nothing is imported here: torch / TRL load only when a training module is imported.
"""
