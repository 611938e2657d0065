// Command upstream exports the input of upstream Karpenter's scheduling benchmark
// (sigs.k8s.io/karpenter, pkg/controllers/provisioning/scheduling, BenchmarkSchedulingN)
// as files jointer can read, then solves that input with upstream's own scheduler.
//
// Usage: upstream --pods N --out DIR [--inputs-only]
//
//	upstream --pods N --out DIR --recheck DIR/jointer.json
//
// It writes DIR/pods.yaml, DIR/catalog.json and DIR/nodepools.yaml (jointer's inputs),
// DIR/workload-summary.json (the workload's distributions) and DIR/upstream.json (upstream's
// plan, per NodeClaim and summarised; not with --inputs-only). Only the Solve call is timed, as
// in upstream's benchmark, whose topology and scheduler construction happen before its timer.
//
// With --recheck it regenerates the same pods, writes nothing but DIR/recheck.json and does not
// solve: it replays jointer's plan (its binding_order) through upstream's own Topology, see
// recheck.go. It exits 4 when that replay refuses a pod or the plan names a pod badly.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	provisioning "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/test"
)

// The benchmark's fixed parameters: its instance-type count and its seed.
const (
	instanceTypeCount = 400
	benchmarkSeed     = 42
	poolName          = "bench"
	nodeClassName     = "default"
)

func main() {
	podCount := flag.Int("pods", 1000, "how many pods to generate (upstream's makeDiversePods(N))")
	outDir := flag.String("out", "", "directory to write the inputs and upstream.json into")
	inputsOnly := flag.Bool("inputs-only", false, "write the inputs and the workload summary, do not solve")
	recheck := flag.String("recheck", "", "jointer's simulate JSON to replay through upstream's topology (writes DIR/recheck.json only)")
	flag.Parse()
	if *outDir == "" || *podCount <= 0 {
		fmt.Fprintln(os.Stderr, "usage: upstream --pods N --out DIR [--inputs-only | --recheck JOINTER_JSON]")
		os.Exit(2)
	}
	if *recheck != "" {
		clean, err := runRecheck(*podCount, *outDir, *recheck)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		if !clean {
			os.Exit(4)
		}
		return
	}
	if err := run(*podCount, *outDir, !*inputsOnly); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(podCount int, outDir string, solveToo bool) error {
	// The scheduler logs through controller-runtime; the benchmark silences it, and so do we.
	crlog.SetLogger(logging.NopLogger)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}

	pods := benchmarkPods(podCount)
	instanceTypes := fake.InstanceTypes(instanceTypeCount)

	if err := writePods(filepath.Join(outDir, "pods.yaml"), pods); err != nil {
		return err
	}
	if err := writeCatalog(filepath.Join(outDir, "catalog.json"), instanceTypes); err != nil {
		return err
	}
	if err := writeNodePools(filepath.Join(outDir, "nodepools.yaml")); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(outDir, "workload-summary.json"), summarize(pods)); err != nil {
		return err
	}

	if !solveToo {
		return nil
	}
	summary, err := solve(pods, instanceTypes)
	if err != nil {
		return err
	}
	return writeJSON(filepath.Join(outDir, "upstream.json"), summary)
}

// benchmarkPods is the benchmark's workload of podCount pods, drawn from a fresh seeded source.
func benchmarkPods(podCount int) []*corev1.Pod {
	return (&podGenerator{rng: rand.New(rand.NewSource(benchmarkSeed))}).diverse(podCount) //nolint:gosec // reproducing a seeded benchmark
}

// podKey is how jointer names a pod: "namespace/name".
func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// ---------------------------------------------------------------------------------------------
// The workload. Upstream's generator lives in a _test.go file, so it is rebuilt here: the same
// five kinds of pod in the same proportions, the same value lists, and the same sequence of
// draws from one math/rand source seeded with 42, so that pod i here is pod i there.

// Candidate values, in upstream's order (the index drawn selects from these lists).
var (
	labelChoices  = []string{"a", "b", "c", "d", "e", "f", "g"}
	memoryChoices = []int{100, 256, 512, 1024, 2048, 4096} // MiB
	cpuChoices    = []int{100, 250, 500, 1000, 1500}       // millicores
)

type podGenerator struct {
	rng  *rand.Rand
	pods []*corev1.Pod
}

func (g *podGenerator) labelValue() string { return labelChoices[g.rng.Intn(len(labelChoices))] }

// requests draws CPU first and memory second: upstream builds the ResourceList literal with the
// CPU entry before the memory entry, and Go evaluates the calls in a literal left to right.
func (g *podGenerator) requests() corev1.ResourceRequirements {
	cpu := resource.MustParse(fmt.Sprintf("%dm", cpuChoices[g.rng.Intn(len(cpuChoices))]))
	mem := resource.MustParse(fmt.Sprintf("%dMi", memoryChoices[g.rng.Intn(len(memoryChoices))]))
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}
}

// add builds a pod with upstream's test builder and gives it a stable name. The name encodes its
// index and kind (p00200-zonespread); upstream's random names play no part in scheduling.
func (g *podGenerator) add(kind string, opts test.PodOptions) {
	// The scheduler keys its per-pod data by UID. Upstream draws random UUIDs; numbered ones are
	// as unique and take one source of variation out of reruns (its queue orders equal pods by
	// creation time before UID, see stampCreationOrder).
	opts.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", len(g.pods)))
	pod := test.Pod(opts)
	pod.Name = fmt.Sprintf("p%05d-%s", len(g.pods), kind)
	g.pods = append(g.pods, pod)
}

// diverse mirrors upstream's makeDiversePods: count/5 pods of each kind, in this order, then the
// remainder as plain pods.
func (g *podGenerator) diverse(count int) []*corev1.Pod {
	share := count / 5
	g.plain(share)
	g.spread(share, corev1.LabelTopologyZone, "zonespread")
	g.spread(share, corev1.LabelHostname, "hostspread")
	g.affine(share, corev1.LabelTopologyZone, "zoneaffinity")
	g.antiAffine(share, corev1.LabelHostname, "hostanti")
	g.plain(count - len(g.pods))
	g.stampCreationOrder()
	return g.pods
}

// plain: one random "my-label" value, no constraint.
func (g *podGenerator) plain(n int) {
	for range n {
		labels := map[string]string{"my-label": g.labelValue()}
		g.add("generic", test.PodOptions{ObjectMeta: metav1.ObjectMeta{Labels: labels}, ResourceRequirements: g.requests()})
	}
}

// spread: a maxSkew-1 DoNotSchedule spread whose selector value is drawn independently of the
// pod's own label value (draw order: own label, selector, CPU, memory).
func (g *podGenerator) spread(n int, key, kind string) {
	for range n {
		own := map[string]string{"my-label": g.labelValue()}
		selected := map[string]string{"my-label": g.labelValue()}
		g.add(kind, test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: own},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew:           1,
				TopologyKey:       key,
				WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector:     &metav1.LabelSelector{MatchLabels: selected},
			}},
			ResourceRequirements: g.requests(),
		})
	}
}

// affine: required pod affinity to pods with its own (random) label, so it can always follow
// itself. The key is spelled "my-affininity" upstream, and so here.
func (g *podGenerator) affine(n int, key, kind string) {
	for range n {
		labels := map[string]string{"my-affininity": g.labelValue()}
		g.add(kind, test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{Labels: labels},
			PodRequirements:      []corev1.PodAffinityTerm{{LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: key}},
			ResourceRequirements: g.requests(),
		})
	}
}

// antiAffine: every such pod is app=nginx and repels every other app=nginx pod on the key.
func (g *podGenerator) antiAffine(n int, key, kind string) {
	for range n {
		labels := map[string]string{"app": "nginx"}
		g.add(kind, test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{Labels: labels},
			PodAntiRequirements:  []corev1.PodAffinityTerm{{LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: key}},
			ResourceRequirements: g.requests(),
		})
	}
}

// stampCreationOrder gives the pods strictly increasing creation times in generation order.
// Upstream's queue breaks ties between equal requests by creation time (then UID); in upstream's
// benchmark test.Pod stamps each pod with time.Now(), which also increases in generation order.
// Fixed stamps keep that order while making the run reproducible.
func (g *podGenerator) stampCreationOrder() {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range g.pods {
		p.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * time.Microsecond))
	}
}

// workloadSummary is the shape of the workload, for comparing generators without shipping the
// pods: jointer's `bench scheduling --profile upstream` generator is tested against it.
type workloadSummary struct {
	Pods int `json:"pods"`
	// Per kind (generic, zonespread, hostspread, zoneaffinity, hostanti): how many pods.
	Kinds map[string]int `json:"kinds"`
	// Per kind, how many pods carry each value of their own label (my-label, my-affininity).
	OwnValues map[string]map[string]int `json:"own_values"`
	// Per spread kind, how many selectors pick each my-label value, and how many pods match
	// their own selector.
	SelectorValues map[string]map[string]int `json:"selector_values"`
	SelfSelecting  map[string]int            `json:"self_selecting"`
	CPUMillis      map[string]int            `json:"cpu_millis"`
	MemoryMiB      map[string]int            `json:"memory_mib"`
}

func summarize(pods []*corev1.Pod) workloadSummary {
	s := workloadSummary{
		Pods: len(pods), Kinds: map[string]int{}, OwnValues: map[string]map[string]int{},
		SelectorValues: map[string]map[string]int{}, SelfSelecting: map[string]int{},
		CPUMillis: map[string]int{}, MemoryMiB: map[string]int{},
	}
	bump := func(m map[string]map[string]int, kind, value string) {
		if m[kind] == nil {
			m[kind] = map[string]int{}
		}
		m[kind][value]++
	}
	for _, p := range pods {
		kind := p.Name[strings.Index(p.Name, "-")+1:]
		s.Kinds[kind]++
		for _, key := range []string{"my-label", "my-affininity"} {
			if v, ok := p.Labels[key]; ok {
				bump(s.OwnValues, kind, v)
			}
		}
		for _, c := range p.Spec.TopologySpreadConstraints {
			selected := c.LabelSelector.MatchLabels["my-label"]
			bump(s.SelectorValues, kind, selected)
			if p.Labels["my-label"] == selected {
				s.SelfSelecting[kind]++
			}
		}
		requests := p.Spec.Containers[0].Resources.Requests
		s.CPUMillis[fmt.Sprint(requests.Cpu().MilliValue())]++
		s.MemoryMiB[fmt.Sprint(requests.Memory().Value()>>20)]++
	}
	return s
}

// ---------------------------------------------------------------------------------------------
// jointer's inputs.

// writePods writes each pod as a plain Pod manifest: only what scheduling reads (labels,
// requests, affinity, spread), not the builder's empty pod-level resources or random names.
func writePods(path string, pods []*corev1.Pod) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	for i, p := range pods {
		out := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name:      "app",
					Image:     p.Spec.Containers[0].Image,
					Resources: p.Spec.Containers[0].Resources,
				}},
				Affinity:                  p.Spec.Affinity,
				TopologySpreadConstraints: p.Spec.TopologySpreadConstraints,
			},
		}
		doc, err := yaml.Marshal(out)
		if err != nil {
			return err
		}
		if i > 0 {
			w.WriteString("---\n")
		}
		w.Write(doc)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

type catalogOffering struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacity_type"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}

type catalogEntry struct {
	Name        string            `json:"name"`
	VCPU        int64             `json:"vcpu"`
	MemoryMiB   int64             `json:"memory_mib"`
	MaxPods     int64             `json:"max_pods"`
	Arch        string            `json:"arch"`
	Labels      map[string]string `json:"labels,omitempty"`
	Offerings   []catalogOffering `json:"offerings"`
	Allocatable map[string]string `json:"allocatable"`
}

// Requirement keys the catalog format carries in fields of its own (name, arch, offerings), or
// that jointer sets itself (the OS comes from the EC2NodeClass's AMI family).
var keysWithOwnField = map[string]bool{
	corev1.LabelInstanceTypeStable: true,
	corev1.LabelArchStable:         true,
	corev1.LabelOSStable:           true,
	corev1.LabelTopologyZone:       true,
	karpv1.CapacityTypeLabelKey:    true,
}

// writeCatalog converts the fake instance types. Allocatable is stated explicitly as upstream's
// InstanceType.Allocatable() (capacity minus the fake kube-reserved), so both solvers pack
// against the same numbers instead of jointer deriving an AWS-style allocatable.
func writeCatalog(path string, types []*cloudprovider.InstanceType) error {
	entries := make([]catalogEntry, 0, len(types))
	for _, it := range types {
		e := catalogEntry{
			Name:      it.Name,
			VCPU:      it.Capacity.Cpu().Value(),
			MemoryMiB: it.Capacity.Memory().Value() / (1 << 20),
			MaxPods:   it.Capacity.Pods().Value(),
			Arch:      it.Requirements.Get(corev1.LabelArchStable).Any(),
			Labels:    map[string]string{},
		}
		for key, req := range it.Requirements {
			if keysWithOwnField[key] {
				continue
			}
			switch req.Operator() {
			case corev1.NodeSelectorOpDoesNotExist:
				// a node of this type has no such label: nothing to write
			case corev1.NodeSelectorOpIn:
				if req.Len() != 1 {
					return fmt.Errorf("%s: requirement %s has %d values; a catalog label holds one", it.Name, key, req.Len())
				}
				e.Labels[key] = req.Any()
			default:
				return fmt.Errorf("%s: requirement %s (%s) cannot be written as a catalog label", it.Name, key, req.Operator())
			}
		}
		for _, o := range it.Offerings {
			e.Offerings = append(e.Offerings, catalogOffering{
				Zone:         o.Requirements.Get(corev1.LabelTopologyZone).Any(),
				CapacityType: o.Requirements.Get(karpv1.CapacityTypeLabelKey).Any(),
				Price:        o.Price,
				Available:    o.Available,
			})
		}
		alloc := it.Allocatable()
		e.Allocatable = map[string]string{
			"cpu":    fmt.Sprintf("%dm", alloc.Cpu().MilliValue()),
			"memory": alloc.Memory().String(),
			"pods":   fmt.Sprintf("%d", alloc.Pods().Value()),
		}
		entries = append(entries, e)
	}
	return writeJSON(path, entries)
}

// writeNodePools writes one pool equivalent to the benchmark's: no requirement upstream means
// every capacity type the offerings have (spot and on-demand), while in jointer (as in the AWS
// provider) a pool without one is on-demand only, so jointer's pool names both. The limits are
// the benchmark's. The EC2NodeClass is only there so the pool is valid; the catalog's explicit
// allocatable overrides what its AMI family would derive.
func writeNodePools(path string) error {
	doc := fmt.Sprintf(`apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: %[2]s
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-bench
  subnetSelectorTerms:
    - tags: { karpenter.sh/discovery: bench }
  securityGroupSelectorTerms:
    - tags: { karpenter.sh/discovery: bench }
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: %[1]s
spec:
  template:
    spec:
      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: %[2]s }
      requirements:
        - { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }
  limits:
    cpu: "10000000"
    memory: 10000000Gi
`, poolName, nodeClassName)
	return os.WriteFile(path, []byte(doc), 0o644)
}

// ---------------------------------------------------------------------------------------------
// Upstream's solve.

type summary struct {
	Karpenter       string   `json:"karpenter"`
	SolveSeconds    float64  `json:"solve_seconds"` // Solve alone, as upstream's benchmark times it
	SetupSeconds    float64  `json:"setup_seconds"` // NewTopology + NewScheduler, before the timer
	Pods            int      `json:"pods"`
	PodsPlaced      int      `json:"pods_placed"`
	Nodes           int      `json:"nodes"`
	PricePerHour    float64  `json:"price_per_hour"`
	Unschedulable   int      `json:"unschedulable"`
	UnschedulableEx []string `json:"unschedulable_examples,omitempty"`
	PeakRSSBytes    int64    `json:"peak_rss_bytes"`
	// Spread pods kube-scheduler would refuse if each bound after every other pod of the plan
	// (refusedIfBoundLast, the same function the recheck applies to jointer's plan).
	RefusedIfBoundLast int                `json:"refused_if_bound_last"`
	NodeClaims         []plannedNodeClaim `json:"nodeclaims"`
}

// plannedNodeClaim is one NodeClaim of upstream's plan with the launch it would take.
type plannedNodeClaim struct {
	InstanceType string   `json:"instance_type"`
	Zone         string   `json:"zone"`
	CapacityType string   `json:"capacity_type"`
	PricePerHour float64  `json:"price_per_hour"`
	Pods         []string `json:"pods"` // "namespace/name", in the order upstream added them
	// How many zones the NodeClaim could launch in at that price: above 1, upstream left its zone
	// open and zone is only the tie-break's pick.
	ZonesAtPrice int `json:"zones_at_price"`
}

// bench is the environment upstream's benchmark schedules in: a context with test options, a fake
// kube client, the fake cloud provider carrying the catalog, cluster state, one NodePool with the
// benchmark's limits and five concurrent reconciles.
type bench struct {
	ctx         context.Context
	kubeClient  client.Client
	cluster     *state.Cluster
	clock       clock.Clock
	pools       []*karpv1.NodePool
	typesByPool map[string][]*cloudprovider.InstanceType
	opts        []provisioning.Options
}

func newBench(instanceTypes []*cloudprovider.InstanceType) *bench {
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
	nodePool := test.NodePool(karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: karpv1.NodePoolSpec{Limits: karpv1.Limits{
			corev1.ResourceCPU:    resource.MustParse("10000000"),
			corev1.ResourceMemory: resource.MustParse("10000000Gi"),
		}},
	})
	cloudProvider := fake.NewCloudProvider()
	cloudProvider.InstanceTypes = instanceTypes
	kubeClient := fakeclient.NewFakeClient()
	clk := &clock.RealClock{}
	return &bench{
		ctx:         ctx,
		kubeClient:  kubeClient,
		cluster:     state.NewCluster(clk, kubeClient, cloudProvider),
		clock:       clk,
		pools:       []*karpv1.NodePool{nodePool},
		typesByPool: map[string][]*cloudprovider.InstanceType{nodePool.Name: instanceTypes},
		opts:        []provisioning.Options{provisioning.NumConcurrentReconciles(5)},
	}
}

// topology is upstream's Topology over pods, built as the benchmark builds it before Solve.
func (b *bench) topology(pods []*corev1.Pod) (*provisioning.Topology, error) {
	t, err := provisioning.NewTopology(b.ctx, b.kubeClient, b.cluster, nil, b.pools, b.typesByPool, pods, b.opts...)
	if err != nil {
		return nil, fmt.Errorf("building upstream's topology: %w", err)
	}
	return t, nil
}

// solve builds the cluster state, topology and scheduler the way upstream's benchmark does (a
// fake kube client, the fake cloud provider carrying the 400 types, one NodePool with the
// benchmark's limits, five concurrent reconciles) and runs one Solve.
func solve(pods []*corev1.Pod, instanceTypes []*cloudprovider.InstanceType) (summary, error) {
	b := newBench(instanceTypes)
	ctx := b.ctx

	setupStart := time.Now()
	topology, err := b.topology(pods)
	if err != nil {
		return summary{}, err
	}
	scheduler := provisioning.NewScheduler(ctx, b.kubeClient, b.pools, b.cluster, nil, topology, b.typesByPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), b.clock, nil, nil, b.opts...)

	setup := time.Since(setupStart)

	start := time.Now()
	results, err := scheduler.Solve(ctx, pods)
	elapsed := time.Since(start)
	if err != nil {
		return summary{}, fmt.Errorf("upstream's Solve: %w", err)
	}

	s := summary{
		Karpenter:     "sigs.k8s.io/karpenter v1.15.0",
		SolveSeconds:  elapsed.Seconds(),
		SetupSeconds:  setup.Seconds(),
		Pods:          len(pods),
		Nodes:         len(results.NewNodeClaims),
		Unschedulable: len(results.PodErrors),
	}
	var placed []placement
	for i, nc := range results.NewNodeClaims {
		s.PodsPlaced += len(nc.Pods)
		chosen, ok := cheapestOffering(nc)
		if !ok {
			return summary{}, fmt.Errorf("a NodeClaim of %d pods has no launchable offering", len(nc.Pods))
		}
		s.PricePerHour += chosen.price
		planned := plannedNodeClaim{InstanceType: chosen.instanceType, Zone: chosen.zone, CapacityType: chosen.capacityType,
			PricePerHour: chosen.price, Pods: make([]string, 0, len(nc.Pods)), ZonesAtPrice: chosen.zonesAtPrice}
		// Upstream drops its placeholder hostname when it finalizes a NodeClaim; every NodeClaim
		// becomes a node of its own, so a name per NodeClaim is its hostname domain.
		host := fmt.Sprintf("upstream-nodeclaim-%05d", i)
		for _, p := range nc.Pods {
			planned.Pods = append(planned.Pods, podKey(p))
			placed = append(placed, placement{pod: p, zone: chosen.zone, host: host})
		}
		s.NodeClaims = append(s.NodeClaims, planned)
	}
	s.RefusedIfBoundLast, err = refusedIfBoundLast(placed, offeredZones(instanceTypes))
	if err != nil {
		return summary{}, fmt.Errorf("upstream's plan: %w", err)
	}
	for pod, perr := range results.PodErrors {
		s.UnschedulableEx = append(s.UnschedulableEx, pod.Name+": "+perr.Error())
	}
	sort.Strings(s.UnschedulableEx)
	if len(s.UnschedulableEx) > 5 {
		s.UnschedulableEx = s.UnschedulableEx[:5]
	}
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err == nil {
		s.PeakRSSBytes = usage.Maxrss * 1024 // Linux reports KiB
	}
	return s, nil
}

// launch is the offering a NodeClaim would launch with.
type launch struct {
	instanceType, zone, capacityType string
	price                            float64
	zonesAtPrice                     int // zones with an allowed offering at price
}

// before orders launches by price, then zone, instance type and capacity type names, so that
// equal prices (every fake offering of a type costs the same) pick one launch deterministically.
func (l launch) before(o launch) bool {
	if l.price != o.price {
		return l.price < o.price
	}
	if l.zone != o.zone {
		return l.zone < o.zone
	}
	if l.instanceType != o.instanceType {
		return l.instanceType < o.instanceType
	}
	return l.capacityType < o.capacityType
}

// cheapestOffering is what the NodeClaim would launch and cost: the cheapest among its
// instance-type options' available offerings that its requirements (zone, capacity type, ...)
// allow, judged the way upstream orders options by price; ties broken as launch.before says.
func cheapestOffering(nc *provisioning.NodeClaim) (launch, bool) {
	best := launch{price: math.Inf(1)}
	zonesAt := map[float64]map[string]bool{}
	for _, it := range nc.InstanceTypeOptions {
		for _, o := range it.Offerings {
			if !o.Available || !nc.Requirements.IsCompatible(o.Requirements, scheduling.AllowUndefinedWellKnownLabels) {
				continue
			}
			candidate := launch{
				instanceType: it.Name,
				zone:         o.Requirements.Get(corev1.LabelTopologyZone).Any(),
				capacityType: o.Requirements.Get(karpv1.CapacityTypeLabelKey).Any(),
				price:        o.Price,
			}
			if zonesAt[candidate.price] == nil {
				zonesAt[candidate.price] = map[string]bool{}
			}
			zonesAt[candidate.price][candidate.zone] = true
			if candidate.before(best) {
				best = candidate
			}
		}
	}
	best.zonesAtPrice = len(zonesAt[best.price])
	return best, !math.IsInf(best.price, 1)
}

// offeredZones is every zone an available offering of the catalog is in, sorted.
func offeredZones(instanceTypes []*cloudprovider.InstanceType) []string {
	seen := map[string]bool{}
	var zones []string
	for _, it := range instanceTypes {
		for _, o := range it.Offerings {
			if z := o.Requirements.Get(corev1.LabelTopologyZone).Any(); o.Available && !seen[z] {
				seen[z] = true
				zones = append(zones, z)
			}
		}
	}
	sort.Strings(zones)
	return zones
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
