module rdq.dev/sdk/go

go 1.22
