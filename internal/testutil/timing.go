package testutil

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// TimeScaleEnv names the environment variable that stretches the waits of timing-sensitive tests: a
// number >= 1 (default 1), e.g. 10 where the tests run under an emulator (qemu TCG runs 5-20x slower).
// A test that waits for something to happen waits Scaled(d), never skips for want of time.
const TimeScaleEnv = "SBX_TEST_TIME_SCALE"

// Scaled returns d stretched by SBX_TEST_TIME_SCALE. A value that is not a number >= 1 panics: a typo
// must not silently leave the waits short.
func Scaled(d time.Duration) time.Duration {
	v := os.Getenv(TimeScaleEnv)
	if v == "" {
		return d
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 {
		panic(fmt.Sprintf("%s=%q: want a number >= 1", TimeScaleEnv, v))
	}
	return time.Duration(float64(d) * f)
}
