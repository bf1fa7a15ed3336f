package main

import (
	"fmt"
	"strings"
	"sync"

	"github.com/sbx-dev/sbx/policy"
)

// planCache keeps the plans the service compiled for its fast clients' runs of a built-in profile.
// policy.Compile reads nothing but the profile and its context (the working directory, the caller's
// environment, the flags' overrides), and a built-in profile is part of the binary: a run with the same
// profile, directory, environment and flags gets the same plan, which nothing modifies once compiled,
// so runs share it. A profile file is read and compiled for each run (it may have changed).
type planCache struct {
	mu    sync.Mutex
	plans map[string]*policy.Plan
}

// maxCachedPlans bounds the cache; a full one starts over.
const maxCachedPlans = 32

// compile is compilePlan, through the cache for a built-in profile.
func (c *planCache) compile(base, profile, cwd string, env []string, ov policy.Overrides) (*policy.Plan, error) {
	if !policy.IsBuiltinName(profile) {
		return compilePlan(base, profile, cwd, env, ov)
	}
	key := planKey(profile, cwd, env, ov)
	c.mu.Lock()
	plan, ok := c.plans[key]
	c.mu.Unlock()
	if ok {
		return plan, nil
	}
	plan, err := compilePlan(base, profile, cwd, env, ov)
	if err != nil {
		return nil, err // not kept: an error is rare, and says what the command line got wrong
	}
	c.mu.Lock()
	if c.plans == nil || len(c.plans) >= maxCachedPlans {
		c.plans = map[string]*policy.Plan{}
	}
	c.plans[key] = plan
	c.mu.Unlock()
	return plan, nil
}

// planKey names everything Compile is given: the profile, the directory, the whole environment (NUL
// never occurs in a name or a value) and the overrides (%#v quotes each string).
func planKey(profile, cwd string, env []string, ov policy.Overrides) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%#v", profile, cwd, len(env), strings.Join(env, "\x00"), ov)
}
