# tests/browser/browser.mk - the browser page (plain HTML/CSS/JS modules in
# daemon/web/, no build step; moshid serves them with server.static_dir) and
# its end-to-end test in headless Chromium (tests/browser/, Debian's
# chromium driven by Playwright from build/venv; docs/browser.md).
#
#   make test-browser   the browser tests alone (make test runs them too)

PYTEST_DIRS += tests/browser

test-browser: $(BUILD)/moshid $(DEMO_DIR)/.ok build/venv/.ok
	$(Q)BUILD=$(BUILD) bash tests/run-tests.sh pytest tests/browser

.PHONY: test-browser
