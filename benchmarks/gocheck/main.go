// gocheck: checks the histories of histories.json with Porcupine, in-process timing.
//
//	gocheck HISTORIES.json            # serve: read "IDX REPS TIMEOUT_MS" lines on stdin,
//	                                  # answer "IDX VERDICT NS1,NS2,... CPUNS1,CPUNS2,..."
//	                                  # (one check per rep: wall-clock, then CPU nanoseconds)
//
// A copy of ../shared/bench/porcupine/gocheck/main.go (built by
// benchmarks/checker_vs_porcupine.py against the shared porcupine-src) that
// also reports each check's CPU time: the process's CPU clock
// (CLOCK_PROCESS_CPUTIME_ID) before and after the check.  Porcupine checks
// partitions in goroutines, so a thread's clock would miss most of them; run
// with GOMAXPROCS=1 the process's clock counts the check's goroutines and its
// garbage collection on the one processor (and the runtime's idle threads,
// which take next to nothing).
//
// Models mirror porcupine_test.go: etcdModel (no partition, no Hash), kvModel
// (partitioned by key, fnv Hash), and a claim register partitioned by object.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/anishathalye/porcupine"
)

type jop struct {
	C    int             `json:"c"`
	T0   int64           `json:"t0"`
	T1   *int64          `json:"t1"`
	F    string          `json:"f"`
	Key  json.RawMessage `json:"key"`
	Args []json.RawMessage `json:"args"`
	Out  json.RawMessage `json:"out"`
	Unk  bool            `json:"unk"`
}

type jhist struct {
	Name  string `json:"name"`
	Model string `json:"model"`
	Ops   []jop  `json:"ops"`
}

// ---- etcd (copied from porcupine_test.go) ----
type etcdInput struct {
	op   uint8
	arg1 int
	arg2 int
}
type etcdOutput struct {
	ok      bool
	exists  bool
	value   int
	unknown bool
}

var etcdModel = porcupine.Model{
	Init: func() interface{} { return -1000000 },
	Step: func(state interface{}, input interface{}, output interface{}) (bool, interface{}) {
		st := state.(int)
		inp := input.(etcdInput)
		out := output.(etcdOutput)
		if inp.op == 0 {
			ok := (out.exists == false && st == -1000000) || (out.exists == true && st == out.value) || out.unknown
			return ok, state
		} else if inp.op == 1 {
			return true, inp.arg1
		} else {
			ok := (inp.arg1 == st && out.ok) || (inp.arg1 != st && !out.ok) || out.unknown
			result := st
			if inp.arg1 == st {
				result = inp.arg2
			}
			return ok, result
		}
	},
}

// ---- kv (copied from porcupine_test.go, Operation partition) ----
type kvInput struct {
	op    uint8
	key   string
	value string
}
type kvOutput struct{ value string }

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		m := make(map[string][]porcupine.Operation)
		for _, v := range history {
			key := v.Input.(kvInput).key
			m[key] = append(m[key], v)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		ret := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			ret = append(ret, m[k])
		}
		return ret
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		inp := input.(kvInput)
		out := output.(kvOutput)
		st := state.(string)
		if inp.op == 0 {
			return out.value == st, state
		} else if inp.op == 1 {
			return true, inp.value
		}
		return true, (st + inp.value)
	},
	Hash: func(state interface{}) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(string)))
		return h.Sum64()
	},
}

// ---- claim register (cortex-spec benchmarks/checker.py ClaimRegister), per object ----
type claimInput struct {
	op  uint8 // 0 claim, 1 release, 2 read
	obj int
}
type claimOutput struct {
	value   bool // claim: won; read: taken
	unknown bool
}

var claimModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		m := make(map[int][]porcupine.Operation)
		for _, v := range history {
			k := v.Input.(claimInput).obj
			m[k] = append(m[k], v)
		}
		keys := make([]int, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		ret := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			ret = append(ret, m[k])
		}
		return ret
	},
	Init: func() interface{} { return false }, // taken?
	Step: func(state, input, output interface{}) (bool, interface{}) {
		taken := state.(bool)
		inp := input.(claimInput)
		out := output.(claimOutput)
		switch inp.op {
		case 0:
			won := !taken
			return out.unknown || out.value == won, true
		case 1:
			return true, false
		default:
			return out.unknown || out.value == taken, taken
		}
	},
	Hash: func(state interface{}) uint64 {
		if state.(bool) {
			return 0x9e3779b97f4a7c15
		}
		return 0
	},
}

func atoi(r json.RawMessage) int {
	n, err := strconv.Atoi(string(r))
	if err != nil {
		panic(err)
	}
	return n
}

func convert(h jhist) ([]porcupine.Operation, porcupine.Model) {
	var maxT int64
	for _, o := range h.Ops {
		if o.T0 > maxT {
			maxT = o.T0
		}
		if o.T1 != nil && *o.T1 > maxT {
			maxT = *o.T1
		}
	}
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	var model porcupine.Model
	for _, o := range h.Ops {
		ret := maxT + 1 // never returned: Porcupine appends the return at the end
		if o.T1 != nil {
			ret = *o.T1
		}
		var in, out interface{}
		switch h.Model {
		case "etcd":
			model = etcdModel
			eo := etcdOutput{unknown: o.Unk}
			switch o.F {
			case "read":
				in = etcdInput{op: 0}
				if !o.Unk && string(o.Out) != "null" {
					eo.exists, eo.value = true, atoi(o.Out)
				}
			case "write":
				in = etcdInput{op: 1, arg1: atoi(o.Args[0])}
			case "cas":
				in = etcdInput{op: 2, arg1: atoi(o.Args[0]), arg2: atoi(o.Args[1])}
				eo.ok = string(o.Out) == "true"
			}
			out = eo
		case "kv":
			model = kvModel
			var key, val, res string
			json.Unmarshal(o.Key, &key)
			if len(o.Args) > 0 {
				json.Unmarshal(o.Args[0], &val)
			}
			json.Unmarshal(o.Out, &res)
			code := map[string]uint8{"get": 0, "put": 1, "append": 2}[o.F]
			in, out = kvInput{op: code, key: key, value: val}, kvOutput{res}
		case "claim":
			model = claimModel
			code := map[string]uint8{"claim": 0, "release": 1, "read": 2}[o.F]
			in = claimInput{op: code, obj: atoi(o.Key)}
			out = claimOutput{value: string(o.Out) == "true", unknown: o.Unk || o.T1 == nil}
		default:
			panic("unknown model " + h.Model)
		}
		ops = append(ops, porcupine.Operation{ClientId: o.C, Input: in, Call: o.T0, Output: out, Return: ret})
	}
	return ops, model
}

// clockProcessCPUTimeID is CLOCK_PROCESS_CPUTIME_ID of <time.h> on Linux.
const clockProcessCPUTimeID = 2

// cpuNow is the process's CPU time so far (nanoseconds).
func cpuNow() int64 {
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		panic(errno)
	}
	return ts.Nano()
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var doc struct {
		Histories []jhist `json:"histories"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		panic(err)
	}
	ops := make([][]porcupine.Operation, len(doc.Histories))
	models := make([]porcupine.Model, len(doc.Histories))
	for i, h := range doc.Histories {
		ops[i], models[i] = convert(h)
	}
	doc.Histories = nil
	in := bufio.NewScanner(os.Stdin)
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "ready %d\n", len(ops))
	w.Flush()
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 {
			continue
		}
		idx, _ := strconv.Atoi(f[0])
		reps, _ := strconv.Atoi(f[1])
		tms, _ := strconv.Atoi(f[2])
		timeout := time.Duration(tms) * time.Millisecond
		var verdict porcupine.CheckResult
		times := make([]string, 0, reps)
		cpus := make([]string, 0, reps)
		for r := 0; r < reps; r++ {
			c := cpuNow()
			t := time.Now()
			verdict = porcupine.CheckOperationsTimeout(models[idx], ops[idx], timeout)
			wall := time.Since(t).Nanoseconds()
			cpus = append(cpus, strconv.FormatInt(cpuNow()-c, 10))
			times = append(times, strconv.FormatInt(wall, 10))
		}
		fmt.Fprintf(w, "%d %s %s %s\n", idx, verdict, strings.Join(times, ","), strings.Join(cpus, ","))
		w.Flush()
	}
}
