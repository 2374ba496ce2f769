module github.com/server-controller/tests/conformance/gophercloud

go 1.25

require github.com/gophercloud/gophercloud/v2 v2.10.0
