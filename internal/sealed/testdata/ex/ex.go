package ex

type act interface{ isAct() }

type (
	actA struct{}
	actB struct{}
	actC struct{}
)

func (actA) isAct()  {}
func (actB) isAct()  {}
func (*actC) isAct() {}

func all(a act) int {
	switch a.(type) {
	case actA, actB:
		return 1
	case *actC:
		return 2
	}
	return 0
}

func some(a act) int {
	switch a.(type) {
	case actA:
		return 1
	}
	return 0
}

type state int

const (
	stOne state = iota
	stTwo
	stThree
)

const other = 4

func allStates(s state) int {
	switch s {
	case stOne, stTwo:
		return 1
	case stThree:
		return 3
	}
	return 0
}

func someStates(s state) int {
	switch s {
	case stOne:
		return 1
	}
	return other
}
