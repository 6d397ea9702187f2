#!/usr/bin/env bash
# backend_test.sh - the CUDA backend table against the CPU backend on tiny
# models, on a device (tests/gpu/device_suite.sh: skips without one; the
# emulator run is tests/gpu/emu/backend_test_emu.sh).
exec bash "$(dirname "$0")/device_suite.sh" backend-test
