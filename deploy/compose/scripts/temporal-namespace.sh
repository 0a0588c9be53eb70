#!/bin/sh
# One-shot: register the namespace the workers use, once the frontend answers.
set -eu
ns="${TEMPORAL_NAMESPACE:-default}"
for _ in $(seq 1 60); do
  temporal operator cluster health --address "${TEMPORAL_ADDRESS}" >/dev/null 2>&1 && break
  sleep 2
done
temporal operator namespace describe -n "$ns" --address "${TEMPORAL_ADDRESS}" >/dev/null 2>&1 \
  || temporal operator namespace create -n "$ns" --retention 7d --address "${TEMPORAL_ADDRESS}"
echo "namespace $ns is registered"
