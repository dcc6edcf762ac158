// Package kvcmtest holds test data about KVCM's formats that more than one package's tests
// need.
package kvcmtest

// LocationIDForms are location ids of every form KVCM writes or may write: random ids,
// EventReport ids ('#', ':'), KVMeta ids, and the bytes a medium or a host may hold (anything
// but '#': '|', spaces, tabs, quotes, backslashes, non-ASCII).
var LocationIDForms = []string{
	"a1b2c3d4",
	"kvs#event_report_l1p5#hbm#10.0.0.8:9000",
	"kvs#event_report_l2#mem#[::1]:9000",
	"kvs#v6d#hbm#10.0.0.8:9000",
	"kvmeta:v1:6b6579",
	"a|b|c",
	"with space",
	" lead and trail ",
	"tab\there",
	"é中文🙂",
	"L#nested",
	"#",
	":",
	"%2F.*>",
	`quo"te\back`,
}
