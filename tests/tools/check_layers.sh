#!/usr/bin/env bash
# check_layers.sh - no circles of calls or includes between the files of
# daemon/, engine/, cuda/ and proto/, and engine/ (and proto/) reach
# neither cuda/ nor daemon/: tests/tools/layers.py on the objects of
# $BUILD (make builds them first). Exit 0, 1 (the violations listed) or 77.
set -u
cd "$(dirname "$0")/../.."
exec python3 tests/tools/layers.py --build "${BUILD:-build}"
