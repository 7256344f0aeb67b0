# check.sh: tests/unit/check.h for shell tests (POSIX sh), sourced:
#
#   . "$LLMQ_SRCDIR/tests/unit/check.sh"
#   check STATUS WHAT   "ok - WHAT" when STATUS is 0, else "FAIL - WHAT"
#   check_done          prints the tally; its status is 0 when nothing failed
#
# The counters are plain variables ($passed, $failed) so that a test can add
# lines counted elsewhere (e.g. by a Python helper).

passed=0
failed=0

check() {
    if [ "$1" -eq 0 ]; then
        echo "ok - $2"
        passed=$((passed + 1))
    else
        echo "FAIL - $2"
        failed=$((failed + 1))
    fi
}

check_done() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
