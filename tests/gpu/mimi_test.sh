#!/usr/bin/env bash
# mimi_test.sh - the device Mimi (cuda/cu_mimi.c) against the CPU codec on
# the committed tiny fixture, on a device (tests/gpu/device_suite.sh: skips
# without one; the emulator run is tests/gpu/emu/mimi_test_emu.sh).
exec bash "$(dirname "$0")/device_suite.sh" mimi-test
