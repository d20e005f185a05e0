"""Paper-scale estimates on one machine (scale.py) and an estimate beside a measured run (beside.py)."""
