#!/bin/sh
# A batch script, as for sbatch: the #FLOTILLA lines are `flotilla run` flags (the command
# line's win), the rest is the job.   flotilla run examples/jobs/train.sh 3
#FLOTILLA -J train-sh --cpu 0.5 --mem 256Mi
#FLOTILLA --time 5m -l kind=example
epochs="${1:-2}"
for epoch in $(seq "$epochs"); do echo "epoch $epoch of $epochs on $FLOTILLA_NODE"; sleep 1; done
echo done
