package main

// Re-checking a plan: "refused if bound last" (one function for both solvers' plans) and the
// replay of jointer's plan through upstream Karpenter's own Topology.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	provisioning "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

// placement is one placed pod of a plan and the domains of its node: the zone it launches in
// and a hostname distinct per NodeClaim.
type placement struct {
	pod        *corev1.Pod
	zone, host string
}

// domainOf is the node's value for a topology key; only the two keys the workload spreads on
// are known.
func (p placement) domainOf(key string) (string, error) {
	switch key {
	case corev1.LabelTopologyZone:
		return p.zone, nil
	case corev1.LabelHostname:
		return p.host, nil
	}
	return "", fmt.Errorf("pod %s: topology key %q is neither zone nor hostname", podKey(p.pod), key)
}

// spreadSelector is the selector kube-scheduler counts a constraint's pods with: the label
// selector plus, for each matchLabelKeys key the pod carries, key In [the pod's value].
func spreadSelector(p *corev1.Pod, c corev1.TopologySpreadConstraint) (labels.Selector, error) {
	sel := &metav1.LabelSelector{}
	if c.LabelSelector != nil {
		sel = c.LabelSelector.DeepCopy()
	}
	for _, key := range c.MatchLabelKeys {
		if v, ok := p.Labels[key]; ok {
			sel.MatchExpressions = append(sel.MatchExpressions,
				metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	if c.LabelSelector == nil && len(c.MatchLabelKeys) == 0 {
		return labels.Nothing(), nil // a spread without a selector selects no pod
	}
	return metav1.LabelSelectorAsSelector(sel)
}

// refusedIfBoundLast counts the placed pods with a DoNotSchedule topology spread that
// kube-scheduler would refuse if each were bound after every other pod of the plan: for some such
// constraint, others(d) + selfMatch - min > maxSkew in the pod's own domain d, where others
// counts the placed pods of the pod's namespace that the constraint's selector matches, in d,
// the pod itself excepted; selfMatch is 1 when the pod matches its own selector; and min is the
// least others(e) over the eligible domains: every zone in zones for topology.kubernetes.io/zone,
// and 0 for kubernetes.io/hostname (a node with none of them can always exist).
//
// It assumes what holds in the benchmark's workload and refuses pods that break it: no node
// selector or required node affinity (every node is eligible) and no minDomains. Taints play no
// part: the benchmark's pool has none.
func refusedIfBoundLast(placed []placement, zones []string) (int, error) {
	type group struct {
		namespace, key string
		selector       labels.Selector
		counts         map[string]int // domain -> placed pods selected
	}
	groups := map[string]*group{}
	// Count each distinct (namespace, key, selector) once over the plan.
	groupOf := func(p *corev1.Pod, c corev1.TopologySpreadConstraint) (*group, error) {
		sel, err := spreadSelector(p, c)
		if err != nil {
			return nil, fmt.Errorf("pod %s: spread selector: %w", podKey(p), err)
		}
		id := p.Namespace + "\x00" + c.TopologyKey + "\x00" + sel.String()
		if g, ok := groups[id]; ok {
			return g, nil
		}
		g := &group{namespace: p.Namespace, key: c.TopologyKey, selector: sel, counts: map[string]int{}}
		for _, other := range placed {
			if other.pod.Namespace != g.namespace || !sel.Matches(labels.Set(other.pod.Labels)) {
				continue
			}
			d, err := other.domainOf(g.key)
			if err != nil {
				return nil, err
			}
			g.counts[d]++
		}
		groups[id] = g
		return g, nil
	}

	refused := 0
	for _, pl := range placed {
		p := pl.pod
		if p.Spec.NodeSelector != nil || (p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil &&
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil) {
			if hasHardSpread(p) {
				return 0, fmt.Errorf("pod %s: a spread pod with node selection; eligible domains are not modelled", podKey(p))
			}
		}
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.WhenUnsatisfiable != corev1.DoNotSchedule {
				continue
			}
			if c.MinDomains != nil {
				return 0, fmt.Errorf("pod %s: minDomains is not modelled", podKey(p))
			}
			g, err := groupOf(p, c)
			if err != nil {
				return 0, err
			}
			own, err := pl.domainOf(c.TopologyKey)
			if err != nil {
				return 0, err
			}
			selfMatch := 0
			if g.selector.Matches(labels.Set(p.Labels)) {
				selfMatch = 1 // and so the pod is in g.counts[own]: others there exclude it
			}
			others := func(d string) int {
				if d == own {
					return g.counts[d] - selfMatch
				}
				return g.counts[d]
			}
			min := 0
			if c.TopologyKey == corev1.LabelTopologyZone {
				for i, z := range zones {
					if n := others(z); i == 0 || n < min {
						min = n
					}
				}
			}
			if others(own)+selfMatch-min > int(c.MaxSkew) {
				refused++
				break // a pod counts once, however many of its constraints refuse it
			}
		}
	}
	return refused, nil
}

func hasHardSpread(p *corev1.Pod) bool {
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------------------------
// jointer's plan through upstream's Topology.

// jointerPlan is what the recheck reads of `jointer simulate --output json`.
type jointerPlan struct {
	NodeClaims []struct {
		NodePool     string   `json:"nodepool"`
		InstanceType string   `json:"instance_type"`
		Zone         string   `json:"zone"`
		CapacityType string   `json:"capacity_type"`
		Pods         []string `json:"pods"`
	} `json:"nodeclaims"`
	RefusedIfBoundLast *int      `json:"refused_if_bound_last"`
	BindingOrder       *[]string `json:"binding_order"`
}

type recheckReport struct {
	Karpenter string `json:"karpenter"`
	Pods      int    `json:"pods"` // pods in the workload
	Replayed  int    `json:"replayed"`
	// Pods of binding_order whose placement upstream's Topology refused, with up to five examples
	// and upstream's error text. A refused pod is still recorded where the plan put it.
	Refused         int      `json:"refused"`
	RefusedExamples []string `json:"refused_examples"`
	// Placed pods (on a NodeClaim) that binding_order does not name.
	MissingFromBindingOrder int `json:"missing_from_binding_order"`
	// Pods binding_order names more than once, or that two NodeClaims both hold.
	PlacedTwice int `json:"placed_twice"`
	// Names in binding_order that are no pod of the workload, or on no NodeClaim.
	NotPlaced        int      `json:"not_placed"`
	PlanningExamples []string `json:"plan_problem_examples,omitempty"`
	// refusedIfBoundLast of jointer's plan, computed here as for upstream's plan.
	RefusedIfBoundLast int `json:"refused_if_bound_last"`
	// What jointer's own JSON says, for comparison.
	JointerRefusedIfBoundLast *int `json:"jointer_refused_if_bound_last"`
}

// runRecheck replays jointer's plan (planPath) of the podCount-pod workload through upstream's
// Topology and writes outDir/recheck.json. clean is false when a pod was refused or the plan
// names a pod twice, not at all, or one that is not in the workload.
func runRecheck(podCount int, outDir, planPath string) (clean bool, err error) {
	crlog.SetLogger(logging.NopLogger)
	data, err := os.ReadFile(planPath)
	if err != nil {
		return false, err
	}
	var plan jointerPlan
	if err := json.Unmarshal(data, &plan); err != nil {
		return false, fmt.Errorf("%s: %w", planPath, err)
	}
	if plan.BindingOrder == nil {
		return false, fmt.Errorf("%s has no binding_order (a failed simulate, or a jointer too old to write it)", planPath)
	}

	pods := benchmarkPods(podCount)
	instanceTypes := fake.InstanceTypes(instanceTypeCount)
	byKey := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		byKey[podKey(p)] = p
	}
	r := recheckReport{Karpenter: "sigs.k8s.io/karpenter v1.15.0", Pods: len(pods), RefusedExamples: []string{},
		JointerRefusedIfBoundLast: plan.RefusedIfBoundLast}
	problem := func(format string, args ...any) {
		if len(r.PlanningExamples) < 5 {
			r.PlanningExamples = append(r.PlanningExamples, fmt.Sprintf(format, args...))
		}
	}

	// Where the plan puts each pod, and its placements for refusedIfBoundLast.
	type node struct{ zone, host, instanceType, capacityType string }
	nodes := make([]node, len(plan.NodeClaims))
	nodeOf := map[string]int{}
	var placed []placement
	for i, nc := range plan.NodeClaims {
		nodes[i] = node{zone: nc.Zone, host: fmt.Sprintf("jointer-nodeclaim-%05d", i), instanceType: nc.InstanceType, capacityType: nc.CapacityType}
		for _, key := range nc.Pods {
			p, ok := byKey[key]
			if !ok {
				r.NotPlaced++
				problem("%s (nodeclaim %d) is not a pod of the workload", key, i)
				continue
			}
			if j, twice := nodeOf[key]; twice {
				r.PlacedTwice++
				problem("%s is on nodeclaims %d and %d", key, j, i)
				continue
			}
			nodeOf[key] = i
			placed = append(placed, placement{pod: p, zone: nodes[i].zone, host: nodes[i].host})
		}
	}
	if r.RefusedIfBoundLast, err = refusedIfBoundLast(placed, offeredZones(instanceTypes)); err != nil {
		return false, fmt.Errorf("jointer's plan: %w", err)
	}

	// Upstream's Topology over the whole workload, as the benchmark builds it for Solve.
	b := newBench(instanceTypes)
	topology, err := b.topology(pods)
	if err != nil {
		return false, err
	}
	// A new NodeClaim's hostname is a domain of its own that upstream registers on every
	// hostname-keyed group (NodeClaim.Add); registering all of them first only adds empty
	// domains, which no rule of the workload reads (hostname spreads take 0 as the minimum).
	for _, n := range nodes {
		topology.Register(corev1.LabelHostname, n.host)
	}

	replayedOnce := map[string]bool{}
	for _, key := range *plan.BindingOrder {
		p, known := byKey[key]
		i, onNode := nodeOf[key]
		switch {
		case !known || !onNode:
			r.NotPlaced++
			problem("binding_order names %s, which is on no nodeclaim", key)
			continue
		case replayedOnce[key]:
			r.PlacedTwice++
			problem("binding_order names %s twice", key)
			continue
		}
		replayedOnce[key] = true
		r.Replayed++
		n := nodes[i]
		// The node's labels as requirements, as a NodeClaim's are once its launch is fixed.
		nodeRequirements := scheduling.NewRequirements(
			scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, n.zone),
			scheduling.NewRequirement(corev1.LabelHostname, corev1.NodeSelectorOpIn, n.host),
			scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, n.instanceType),
			scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, n.capacityType),
		)
		if refusal := admit(topology, p, nodeRequirements, n.zone, n.host); refusal != "" {
			r.Refused++
			if len(r.RefusedExamples) < 5 {
				r.RefusedExamples = append(r.RefusedExamples, fmt.Sprintf("%s on nodeclaim %d (%s, %s): %s", key, i, n.zone, n.instanceType, refusal))
			}
		}
		// Bind it where the plan puts it, refused or not, so later pods see the plan's counts.
		topology.Record(p, nil, nodeRequirements, scheduling.AllowUndefinedWellKnownLabels)
	}
	for key := range nodeOf {
		if !replayedOnce[key] {
			r.MissingFromBindingOrder++
			problem("%s is on nodeclaim %d but not in binding_order", key, nodeOf[key])
		}
	}
	sort.Strings(r.PlanningExamples)

	if err := writeJSON(filepath.Join(outDir, "recheck.json"), r); err != nil {
		return false, err
	}
	return r.Refused == 0 && r.MissingFromBindingOrder == 0 && r.PlacedTwice == 0 && r.NotPlaced == 0, nil
}

// admit asks upstream's Topology whether pod p may bind to a node with nodeRequirements, as
// NodeClaim.Add's check does (nodeclaim.go: AddRequirements with the pod's strict requirements,
// then compatibility of the result with the node's), and also requires the result to keep the
// node's zone and hostname. It returns "" when admitted, else why not.
func admit(topology *provisioning.Topology, p *corev1.Pod, nodeRequirements scheduling.Requirements, zone, host string) string {
	tightened, err := topology.AddRequirements(p, nil, scheduling.NewStrictPodRequirements(p), nodeRequirements, scheduling.AllowUndefinedWellKnownLabels)
	if err != nil {
		return err.Error()
	}
	if err := nodeRequirements.Compatible(tightened, scheduling.AllowUndefinedWellKnownLabels); err != nil {
		return err.Error()
	}
	if !tightened.Get(corev1.LabelTopologyZone).Has(zone) || !tightened.Get(corev1.LabelHostname).Has(host) {
		return fmt.Sprintf("topology narrows the node to %s", tightened)
	}
	return ""
}
