module github.com/flowlake/flowlake/collectors/routing

go 1.26.0

require (
	github.com/gaissmai/bart v0.30.0
	github.com/osrg/gobgp/v3 v3.37.0
)
