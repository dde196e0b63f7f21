#!/usr/bin/env bash
# Stops what tests/slurm/start.sh started.
pkill -x slurmd || true
pkill -x slurmctld || true
