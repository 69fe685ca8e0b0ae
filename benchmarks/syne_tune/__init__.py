"""Syne Tune 0.13.0's learning-curve schedulers (ASHA, MOBSTER, Hyper-Tune, BOHB, DyHPO)
as baselines on the harness's tables, run in a separate virtualenv (see ``methods.py``)."""
